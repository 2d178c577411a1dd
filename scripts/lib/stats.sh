# Shared by the benchmark scripts (sourced, not run): the median and the
# range of a run's rounds, read as whitespace-separated numbers on stdin.

# median: the middle value (the mean of the two middle ones for an even count).
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# range FORMAT: "lo–hi", each printed with the printf FORMAT (e.g. %.2f).
range() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk -v f="$1" 'NR == 1 { lo = $1 } { hi = $1 } END { printf f "–" f, lo, hi }'; }
