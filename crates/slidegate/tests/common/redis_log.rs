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

/// Records `[s, e)`, then the header: H, o1, T1, nt, nT, s, e, exp (f64 LE),
/// the record format (5 bytes), ow, tw, and the format's mark (254). A
/// record is its time modulo 256^ow and its running total modulo 256^tw,
/// little-endian. Records whose cost was given back by a cross-slot undo
/// (cost 0) are left out.
pub fn decode_log(raw: &[u8]) -> Vec<(u64, u64)> {
    const HEADER: usize = 72;
    let Some(at) = raw.len().checked_sub(HEADER) else {
        return Vec::new();
    };
    let header = &raw[at..];
    let number = |i: usize| {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(&header[8 * i..8 * i + 8]);
        f64::from_le_bytes(bytes) as u64
    };
    let (before, newest_at, newest_total) = (number(0), number(3), number(4));
    let (s, e) = (number(5) as usize, number(6) as usize);
    let (ow, tw) = (usize::from(header[69]), usize::from(header[70]));
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
