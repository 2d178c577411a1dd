//! `--max-store-calls`: the Redis store's calls in flight at once. A
//! decision beyond them waits for a call to end, within its deadline
//! (`--store-timeout-ms`); if none ends in time, the failure policy
//! answers it, marked degraded. The calls that reach Redis are counted by
//! a proxy on the wire between the store and a real redis-server.

mod common;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::redis::Redis;
use slidegate::store::resilient::FailurePolicy;
use slidegate::{Rule, Store};
use slidegate_server::store::{Backend, StoreUrl};
use slidegate_server::store::{ClockMode, CoalesceMode, StoreOptions};

async fn open_at(
    url: String,
    coalesce: CoalesceMode,
    max_store_calls: u32,
    timeout_ms: u64,
) -> Backend {
    let args = StoreOptions {
        url: StoreUrl::Redis(url),
        on_error: FailurePolicy::Deny,
        timeout_ms,
        clock: ClockMode::Server,
        coalesce,
        expiry_margin_ms: None,
        max_keys: 1_000_000,
        max_memory_bytes: slidegate::store::memory::DEFAULT_MAX_BYTES,
        max_rules_per_key: 16,
        deny_cache_entries: 0,
        max_store_calls,
        max_leases: slidegate::store::DEFAULT_MAX_LEASES,
    };
    Backend::connect(&args).await.expect("the store opens")
}

/// While Redis sleeps, one decision holds the only call allowed. With a
/// deadline longer than the sleep, a second decision waits for that call
/// to end and is decided by Redis, the two calls reaching Redis one after
/// the other; with a shorter one, the policy (here: deny) answers it by
/// its deadline, before Redis wakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_beyond_the_calls_in_flight_waits_for_one_within_its_deadline() {
    let redis = Arc::new(Redis::start_with(&["--enable-debug-command", "local"]));
    let rule = [Rule::parse("100/1m").expect("a valid rule")];
    for (timeout_ms, sleep, by_redis) in [(5_000, "0.6", true), (400, "1.2", false)] {
        let proxy = CallCounter::start(redis.port());
        let backend = Arc::new(open_at(proxy.url(), CoalesceMode::On, 1, timeout_ms).await);
        // The connection is up before Redis sleeps.
        assert!(
            backend
                .acquire("warm", &rule, 1)
                .await
                .expect("decided")
                .allowed()
        );
        let sleeper = Arc::clone(&redis);
        let sleep = std::thread::spawn(move || sleeper.text(&["DEBUG", "SLEEP", sleep]));
        while redis_answers_within(&redis, Duration::from_millis(20)) {
            std::thread::sleep(Duration::from_millis(2));
        }
        let slept_from = Instant::now();
        let first = {
            let backend = Arc::clone(&backend);
            tokio::spawn(async move { backend.acquire("a", &rule, 1).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let second = backend.acquire("b", &rule, 1).await.expect("decided");
        let answered_after = slept_from.elapsed();
        let first = first.await.expect("the first call").expect("decided");
        assert_eq!(sleep.join().expect("DEBUG SLEEP"), "OK");
        if by_redis {
            assert!(first.allowed() && !first.degraded(), "{first:?}");
            assert!(
                second.allowed() && !second.degraded(),
                "waited and decided by Redis: {second:?}"
            );
            assert_eq!(proxy.peak(), 1, "script calls in flight at once");
        } else {
            for d in [first, second] {
                assert!(
                    !d.allowed() && d.degraded(),
                    "answered by the policy (deny): {d:?}"
                );
            }
            assert!(
                answered_after < Duration::from_millis(1_000),
                "by its deadline, before Redis woke: {answered_after:?}"
            );
        }
    }
}

/// 24 decisions on 24 keys at once while Redis sleeps, with
/// `--max-store-calls 4` and coalescing off (one script call per
/// decision): exactly 4 script calls reach Redis while it sleeps, never
/// more at any time of the burst, and every decision is made by Redis in
/// its turn once it wakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_never_has_more_script_calls_in_flight_than_max_store_calls() {
    const BOUND: u32 = 4;
    const BURST: usize = 24;
    let redis = Arc::new(Redis::start_with(&["--enable-debug-command", "local"]));
    let proxy = CallCounter::start(redis.port());
    let backend = Arc::new(open_at(proxy.url(), CoalesceMode::Off, BOUND, 5_000).await);
    let rule = [Rule::parse("100/1m").expect("a valid rule")];
    assert!(
        backend
            .acquire("warm", &rule, 1)
            .await
            .expect("decided")
            .allowed()
    );
    // Warm: the script is loaded (a first EVALSHA may get NOSCRIPT).
    assert_eq!(proxy.peak(), 1, "one script call at a time to warm up");
    proxy.reset_peak();
    let warm_calls = proxy.calls();
    let sleeper = Arc::clone(&redis);
    let sleep = std::thread::spawn(move || sleeper.text(&["DEBUG", "SLEEP", "0.5"]));
    while redis_answers_within(&redis, Duration::from_millis(20)) {
        std::thread::sleep(Duration::from_millis(2));
    }
    let burst: Vec<_> = (0..BURST)
        .map(|i| {
            let backend = Arc::clone(&backend);
            tokio::spawn(async move { backend.acquire(&format!("burst{i}"), &rule, 1).await })
        })
        .collect();
    // While Redis sleeps no call ends: what reached it is what is in flight.
    let asleep = Instant::now();
    while proxy.in_flight() < u64::from(BOUND) && asleep.elapsed() < Duration::from_millis(300) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let in_flight_asleep = proxy.in_flight();
    for call in burst {
        let d = call.await.expect("a burst task").expect("decided");
        assert!(d.allowed() && !d.degraded(), "decided by Redis: {d:?}");
    }
    assert_eq!(sleep.join().expect("DEBUG SLEEP"), "OK");
    assert_eq!(
        in_flight_asleep,
        u64::from(BOUND),
        "script calls held by the sleeping Redis, with --max-store-calls {BOUND}"
    );
    assert_eq!(
        proxy.peak(),
        u64::from(BOUND),
        "script calls in flight at once over the burst, with --max-store-calls {BOUND}"
    );
    assert_eq!(
        proxy.calls() - warm_calls,
        BURST as u64,
        "one script call per decision"
    );
}

/// True when Redis answers a PING within `within`.
fn redis_answers_within(redis: &Redis, within: Duration) -> bool {
    use std::io::Read;
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", redis.port())) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(within));
    stream.write_all(b"PING\r\n").is_ok() && stream.read_exact(&mut [0u8; 1]).is_ok()
}

/// A TCP proxy in front of a redis-server that reads the RESP on the wire
/// both ways and counts the script calls (`EVAL…`) sent and not yet
/// answered: a call counts from before its last byte reaches Redis until
/// its answer has been read from Redis.
struct CallCounter {
    port: u16,
    counts: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    calls: AtomicU64,
    in_flight: AtomicU64,
    peak: AtomicU64,
}

impl CallCounter {
    fn start(redis_port: u16) -> CallCounter {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port for the proxy");
        let port = listener.local_addr().expect("its address").port();
        let counts = Arc::new(Counts::default());
        let shared = Arc::clone(&counts);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", redis_port)) else {
                    return;
                };
                relay(client, server, Arc::clone(&shared));
            }
        });
        CallCounter { port, counts }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn calls(&self) -> u64 {
        self.counts.calls.load(Ordering::SeqCst)
    }

    fn in_flight(&self) -> u64 {
        self.counts.in_flight.load(Ordering::SeqCst)
    }

    fn peak(&self) -> u64 {
        self.counts.peak.load(Ordering::SeqCst)
    }

    fn reset_peak(&self) {
        self.counts.peak.store(self.in_flight(), Ordering::SeqCst);
    }
}

/// Relays one connection both ways. Redis answers the commands of a
/// connection in order: the queue says which answers end a script call.
fn relay(client: TcpStream, server: TcpStream, counts: Arc<Counts>) {
    let scripts = Arc::new(Mutex::new(VecDeque::new()));
    let (up_in, up_out) = (
        client.try_clone().expect("a client handle"),
        server.try_clone().expect("a server handle"),
    );
    let (queue, up_counts) = (Arc::clone(&scripts), Arc::clone(&counts));
    std::thread::spawn(move || {
        forward(up_in, up_out, |message| {
            let script = command_name(message)
                .to_ascii_uppercase()
                .starts_with(b"EVAL");
            if script {
                up_counts.calls.fetch_add(1, Ordering::SeqCst);
                let now = up_counts.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                up_counts.peak.fetch_max(now, Ordering::SeqCst);
            }
            queue.lock().expect("the queue").push_back(script);
        })
    });
    std::thread::spawn(move || {
        forward(server, client, |_| {
            if scripts.lock().expect("the queue").pop_front() == Some(true) {
                counts.in_flight.fetch_sub(1, Ordering::SeqCst);
            }
        })
    });
}

/// Copies whole RESP messages from `from` to `to`, calling `seen` on each
/// before it is written; closes both when either side does.
fn forward(from: TcpStream, mut to: TcpStream, mut seen: impl FnMut(&[u8])) {
    let mut reader = BufReader::new(from.try_clone().expect("a handle"));
    let mut message = Vec::new();
    loop {
        message.clear();
        if read_message(&mut reader, &mut message).is_err() || message.is_empty() {
            break;
        }
        seen(&message);
        if to.write_all(&message).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// Reads one RESP message (RESP2 or RESP3) into `out`; nothing at EOF.
fn read_message(reader: &mut impl BufRead, out: &mut Vec<u8>) -> std::io::Result<()> {
    let start = out.len();
    if reader.read_until(b'\n', out)? == 0 {
        return Ok(());
    }
    let line = &out[start..];
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not RESP");
    let number: i64 = std::str::from_utf8(line.get(1..line.len().saturating_sub(2)).unwrap_or(b""))
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    match line.first() {
        // Bulk string, verbatim string, bulk error: a length, then bytes.
        Some(b'$' | b'=' | b'!') if number >= 0 => {
            let mut body = vec![0u8; number as usize + 2];
            reader.read_exact(&mut body)?;
            out.extend_from_slice(&body);
        }
        // Array, set, push; a map holds two messages per entry.
        Some(b'*' | b'~' | b'>' | b'%') => {
            let items = if line[0] == b'%' { 2 * number } else { number };
            for _ in 0..items.max(0) {
                let before = out.len();
                read_message(reader, out)?;
                if out.len() == before {
                    return Err(bad());
                }
            }
        }
        Some(_) => {}
        None => return Err(bad()),
    }
    Ok(())
}

/// The first word of a command (an array of bulk strings).
fn command_name(message: &[u8]) -> &[u8] {
    message
        .split(|&b| b == b'\n')
        .nth(2)
        .map_or(&[][..], |name| name.strip_suffix(b"\r").unwrap_or(name))
}
