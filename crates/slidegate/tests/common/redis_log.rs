//! Reads a sliding log back from Redis as stored, to check admissions
//! against the limit from outside the store.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis::AsyncCommands;

/// A sliding log as stored (see `store/redis/sliding_log.lua`): `(time µs,
/// cost)` per live record, oldest first.
pub async fn read_log(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<(u64, u64)> {
    let raw: Option<Vec<u8>> = conn.get(key).await.expect("GET");
    decode_log(&raw.unwrap_or_default())
}

/// Records `[s, e)`, then the header: the format's mark (254), H, o1, T1,
/// nt, nT, s, e, exp (f64 LE), the record format (5 bytes), ow, tw. A
/// record is its time modulo 256^ow and its running total modulo 256^tw,
/// little-endian. Records whose cost was given back by a cross-slot undo
/// (cost 0) are left out.
pub fn decode_log(raw: &[u8]) -> Vec<(u64, u64)> {
    const HEADER: usize = 72;
    let Some(at) = raw.len().checked_sub(HEADER) else {
        return Vec::new();
    };
    let header = &raw[at + 1..];
    let number = |i: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&header[8 * i..8 * i + 8]);
        f64::from_le_bytes(bytes) as u64
    };
    let (before, newest_at, newest_total) = (number(0), number(3), number(4));
    let (s, e) = (number(5) as usize, number(6) as usize);
    let (ow, tw) = (usize::from(header[69]), usize::from(header[70]));
    assert_eq!(raw[at], 254, "the format's mark");
    let little = |b: &[u8]| b.iter().rev().fold(0u64, |a, &x| a << 8 | u64::from(x));
    let (time_mask, total_mask) = ((1u64 << (8 * ow)) - 1, (1u64 << (8 * tw)) - 1);
    let mut before = before;
    raw[s..e]
        .chunks_exact(ow + tw)
        .map(|record| {
            let time = newest_at - (newest_at.wrapping_sub(little(&record[..ow])) & time_mask);
            let total =
                newest_total - (newest_total.wrapping_sub(little(&record[ow..])) & total_mask);
            let cost = total - before;
            before = total;
            (time, cost)
        })
        .filter(|&(_, cost)| cost > 0)
        .collect()
}

/// Reads the sliding log at `key` every 20 ms until `until`, on a thread
/// of its own so the load cannot starve it: `(time µs, cost)` of every
/// admission seen, and the longest gap between two reads.
pub fn read_log_until(
    url: String,
    key: String,
    until: Instant,
) -> std::thread::JoinHandle<(BTreeMap<u64, u64>, Duration)> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let mut conn = redis::Client::open(url)
                .expect("a valid URL")
                .get_multiplexed_async_connection()
                .await
                .expect("a plain connection");
            let mut seen = BTreeMap::new();
            let (mut last, mut longest_gap) = (Instant::now(), Duration::ZERO);
            while Instant::now() < until {
                for (at, cost) in read_log(&mut conn, &key).await {
                    let seen_cost = seen.entry(at).or_insert(0);
                    *seen_cost = cost.max(*seen_cost);
                }
                longest_gap = longest_gap.max(last.elapsed());
                last = Instant::now();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (seen, longest_gap)
        })
    })
}

/// A sliding log in the stored layout, as the script would have written
/// it: the records `(time µs, cost)` (times increasing, all within one
/// window of the newest, costs summing to at most the limit), every one
/// kept, widths chosen for `window_us` and `limit`.
pub fn encode_log(records: &[(u64, u64)], window_us: u64, limit: u64) -> Vec<u8> {
    let width = |max: u64| {
        (1..=7)
            .find(|&w| 1u128 << (8 * w) > u128::from(max))
            .unwrap_or(7)
    };
    let (ow, tw) = (width(window_us), width(limit));
    let mut out = Vec::with_capacity(records.len() * (ow + tw) + 72);
    let mut total = 0u64;
    for &(time, cost) in records {
        total += cost;
        out.extend_from_slice(&time.to_le_bytes()[..ow]);
        out.extend_from_slice(&total.to_le_bytes()[..tw]);
    }
    let (first, newest) = (records[0], records[records.len() - 1]);
    let e = out.len() as f64;
    out.push(254);
    for x in [
        0.0,
        first.0 as f64,
        first.1 as f64,
        newest.0 as f64,
        total as f64,
        0.0,
        e,
        (newest.0 + window_us + 1) as f64,
    ] {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.extend_from_slice(format!("<I{ow}I{tw}").as_bytes());
    out.extend_from_slice(&[ow as u8, tw as u8]);
    out
}

/// The `GETRANGE` calls Redis ran (a script's included) while `during`
/// ran, seen through `MONITOR` on `port`: `(start, end)` of each.
pub fn getranges_during<T>(port: u16, during: impl FnOnce() -> T) -> (T, Vec<(i64, i64)>) {
    use std::io::{BufRead, BufReader, Write};
    let marker = "slidegate-monitor-marker";
    let mut monitor = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    monitor.write_all(b"MONITOR\r\n").expect("MONITOR");
    let mut lines = BufReader::new(monitor.try_clone().expect("a second handle"));
    let mut line = String::new();
    lines.read_line(&mut line).expect("+OK");
    assert!(line.starts_with("+OK"), "{line}");
    let value = during();
    let mut other = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    other
        .write_all(format!("*2\r\n$4\r\nECHO\r\n${}\r\n{marker}\r\n", marker.len()).as_bytes())
        .expect("ECHO");
    let mut ranges = Vec::new();
    loop {
        line.clear();
        lines.read_line(&mut line).expect("a monitor line");
        if line.contains(marker) {
            break;
        }
        let words: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
        if words
            .first()
            .is_some_and(|w| w.eq_ignore_ascii_case("getrange"))
            && words.len() == 4
        {
            let n = |w: &str| w.parse::<i64>().expect("a GETRANGE bound");
            ranges.push((n(words[2]), n(words[3])));
        }
    }
    (value, ranges)
}
