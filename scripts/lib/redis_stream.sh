# Shared by the Redis benchmark scripts (sourced, not run): slidegate's
# Lua script as the library sends it, and streams of EVALSHA calls in RESP
# for it and for the seeds' script. Needs $ROOT (the repository) and perl.

SCRIPT_RS=$ROOT/crates/slidegate/src/store/redis/script.rs
SEED_LUA=$ROOT/crates/slidegate/benches/seed_sliding_window.lua

# slidegate's script, as script.rs assembles it: the parts of
# SCRIPT_SOURCE in turn, then every name of codes.lua written as its number
# (in code, not in comments).
ours_text() {
  sed -n '/SCRIPT_SOURCE: &str = concat!(/,/^);/p' "$SCRIPT_RS" |
    perl -ne '
      BEGIN { $dir = shift }
      if (/include_str!\("([a-z_]+\.lua)"\)/) {
        open(my $f, "<", "$dir/$1") or die "$dir/$1: $!";
        print <$f>;
      } elsif (/^\s*"(.*)",\s*$/) {
        (my $text = $1) =~ s/\\n/\n/g;
        print $text;
      }
    ' "$ROOT/crates/slidegate/src/store/redis" |
    perl -e '
      open(my $f, "<", shift) or die "codes.lua: $!";
      my %number;
      while (<$f>) {
        next unless /^local (.*?)=(.*)$/;
        my @names = map { s/^\s+|\s+$//gr } split /,/, $1;
        my @numbers = map { s/^\s+|\s+$//gr } split /,/, $2;
        @number{@names} = @numbers;
      }
      while (my $line = <STDIN>) {
        my $at = index($line, "--");
        my ($code, $comment) = $at < 0 ? ($line, "") : (substr($line, 0, $at), substr($line, $at));
        $code =~ s/(\w+)/exists $number{$1} ? $number{$1} : $1/ge;
        print $code, $comment;
      }
    ' "$ROOT/crates/slidegate/src/store/redis/codes.lua"
}

# A stream of EVALSHA calls in RESP on a synthetic clock.
#   gen KIND SHA KEYS LIMIT WINDOW_MS RATE FROM TO [MARGIN_MS]
# KIND: seed (the seeds' script: time in ms, a UUID member), ours
# (slidegate's script on the caller's clock: ARGV[1] as binary doubles,
# with the expiry margin MARGIN_MS, default 1) or ours-time (the same on
# Redis' clock: TIME in the script, the stream's clock unused).
# The clock advances 1e6/RATE µs per decision; KEYS = 1 is one hot key,
# otherwise a reproducible random key in 0..KEYS-1.
#   gen ours-coalesced SHA KEYS LIMIT WINDOW_MS RATE FROM TO MARGIN_MS BATCH
# sends the same decisions BATCH to a call, as a coalesced call of the
# store does (batch.lua), each call at the time of its first decision.
gen() {
  perl -e '
    use strict;
    my ($kind, $sha, $keys, $limit, $window_ms, $rate, $from, $to, $margin, $batch) = @ARGV;
    $margin = 1 unless defined $margin;
    $batch = 1 unless defined $batch;
    srand(7919 * $from + 1);
    binmode STDOUT;
    my $t0 = 1700000000000000;
    sub bulk { return "\$" . length($_[0]) . "\r\n" . $_[0] . "\r\n" }
    my $out = "";
    for (my $i = $from; $i < $to; $i++) {
      my $t = $t0 + int($i * 1000000 / $rate);
      my $k = $keys == 1 ? "hot" : int(rand($keys));
      my @args;
      if ($kind eq "ours-coalesced") {
        # One call of BATCH decisions (COALESCED = 4, MODE_SCALE = 2^20,
        # see codes.lua), each one sliding-log hit of cost 1.
        my $n = $to - $i < $batch ? $to - $i : $batch;
        my $spec = pack("d<3", $t, $margin, -(4 * 1048576 + $n));
        my @keys = ("slidegate:v2:{$k}:$limit/1s");
        for my $d (1 .. $n) {
          if ($d > 1) {
            $k = $keys == 1 ? "hot" : int(rand($keys));
            push @keys, "slidegate:v2:{$k}:$limit/1s";
          }
          $spec .= pack("d<6", 1, 1, 0, $limit, $window_ms * 1000, 1);
        }
        $i += $n - 1;
        @args = ("EVALSHA", $sha, scalar(@keys), @keys, $spec);
      } elsif ($kind eq "seed") {
        my $member = sprintf("%08x-%04x-4%03x-8%03x-%012x", $i, int(rand(65536)),
          int(rand(4096)), int(rand(4096)), int(rand(2 ** 40)));
        @args = ("EVALSHA", $sha, 1, "seed:{$k}", int($t / 1000), $window_ms, $limit, $member);
      } else {
        my $now = $kind eq "ours-time" ? -1 : $t;
        my $spec = pack("d<7", $now, $margin, 1, 0, $limit, $window_ms * 1000, 1);
        @args = ("EVALSHA", $sha, 1, "slidegate:v2:{$k}:$limit/1s", $spec);
      }
      $out .= "*" . scalar(@args) . "\r\n" . join("", map { bulk($_) } @args);
      if (length($out) > 1 << 20) { print $out; $out = "" }
    }
    print $out;
  ' "$@"
}
