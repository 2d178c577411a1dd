//! The sliding log's stored bytes, byte for byte, as the script of
//! 4d6b6f4 stored them: a change to the script's Lua that keeps the format
//! must keep them. A fixed sequence of decisions on a client clock (new
//! logs, admissions in the same µs and later, records dropped by
//! admissions and by a denial, a compaction, expiry moves with the log in
//! hand and not, a clock that steps back, logs that expire whole, a batch
//! of the general code) leaves, after each step, the values recorded from
//! that script (`STORED`: a digest of every key's value per step). Run
//! twice: each decision a call of its own (the inline steps) and in bursts
//! that go as coalesced calls (the same steps as a function, with the
//! call's memo); both must leave the same bytes.

mod common;

use std::time::Duration;

use common::redis_server::RedisServer;
use redis::AsyncCommands;
use slidegate::clock::ManualClock;
use slidegate::store::redis::Coalesce;
use slidegate::{Hit, RedisStore, Rule, Store};

const KEYS: [&str; 5] = ["a", "b", "c", "d", "e"];
const T0: u64 = 1_763_800_000_000_000;

/// One step of the sequence.
enum Step {
    /// The clock moves by this many µs (negative: back).
    Advance(i64),
    /// Requests made at once: (key, cost) under the rule, in order.
    Burst(Vec<(usize, u64)>),
    /// One all-or-nothing batch of hits (the general code).
    Batch(Vec<(usize, u64)>),
}

fn steps() -> Vec<Step> {
    use Step::{Advance, Batch, Burst};
    let mut steps = vec![
        // New logs, written whole.
        Burst(vec![(0, 1), (1, 1), (2, 1), (3, 10), (4, 1)]),
        // Same µs as the newest record, then later ones.
        Burst(vec![(0, 1), (0, 2), (1, 3)]),
        Advance(10_000),
        Burst(vec![(0, 1), (0, 1), (1, 1), (2, 1)]),
        Advance(500_000),
        Burst(vec![(3, 10), (4, 1), (4, 0)]),
    ];
    // Key a gets a record every 70 ms: more than 64 bytes of live records
    // (not all in hand when its expiry moves), records dropped by each
    // admission, and dead bytes until a compaction.
    for i in 0..40 {
        steps.push(Advance(70_000));
        let mut burst = vec![(0, 1), (1, 1), (4, 0)];
        if i % 7 == 0 {
            burst.push((0, 2));
        }
        if i == 8 {
            // Key d's first 10 have expired, 10 are live: 15 more is
            // denied, and the denial writes the header without them.
            burst.push((3, 15));
        }
        steps.push(Burst(burst));
    }
    steps.extend([
        // Every record of d has expired: admitted anew, then denied.
        Advance(1),
        Burst(vec![(3, 15), (3, 15), (2, 1)]),
        // A clock 2 s behind the newest record: admissions at that record.
        Advance(-2_000_000),
        Burst(vec![(0, 1), (1, 1), (0, 1)]),
        Advance(2_000_000),
        Batch(vec![(0, 1), (1, 2)]),
        // Every record of e and c expires: a probe deletes e, an admission
        // starts c anew.
        Advance(5_000_000),
        Burst(vec![(4, 0), (2, 1), (2, 1), (0, 1)]),
        Advance(300_000),
        Burst(vec![(0, 20), (0, 1), (2, 1)]),
    ]);
    steps
}

/// FNV-1a, 64 bits.
fn fnv(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The digest of every key's value, `None` standing for a missing key.
fn digest(values: &[Option<Vec<u8>>]) -> u64 {
    values
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |hash, value| match value {
            Some(v) => fnv(fnv(hash, &(v.len() as u64).to_le_bytes()), v),
            None => fnv(hash, &u64::MAX.to_le_bytes()),
        })
}

/// Runs the sequence on its own prefix; after each step that decides,
/// every key's value.
async fn run(server: &RedisServer, coalesced: bool) -> Vec<Vec<Option<Vec<u8>>>> {
    let clock = ManualClock::at(T0);
    let coalesce = if coalesced {
        Coalesce::on().max_in_flight(1).max_decisions(80)
    } else {
        Coalesce::off()
    };
    let store = RedisStore::builder(server.url())
        .prefix(if coalesced { "coalesced" } else { "alone" })
        .client_clock(clock.clone())
        .expiry_margin(Duration::from_secs(3600))
        .timeout(Duration::from_secs(5))
        .coalesce(coalesce)
        .build()
        .await
        .expect("the Redis store connects");
    let rule = Rule::parse("20/1s").expect("a valid rule");
    let mut conn = redis::Client::open(server.url())
        .expect("a valid URL")
        .get_multiplexed_async_connection()
        .await
        .expect("a plain connection");
    // The script is loaded by a first call, on a key of its own.
    store.acquire("warm", &[rule], 0).await.expect("a decision");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .expect("CONFIG RESETSTAT");
    let mut decisions = 0u64;
    let mut values = Vec::new();
    for step in steps() {
        match step {
            Step::Advance(us) => {
                if us >= 0 {
                    clock.advance(Duration::from_micros(us.unsigned_abs()));
                } else {
                    clock.set(clock_now(&clock) - us.unsigned_abs());
                }
                continue;
            }
            Step::Burst(requests) => {
                decisions += requests.len() as u64;
                let tasks: Vec<_> = requests
                    .into_iter()
                    .map(|(key, cost)| {
                        let store = store.clone();
                        let call = async move { store.acquire(KEYS[key], &[rule], cost).await };
                        if coalesced {
                            // All at once: the first goes alone, the others
                            // wait for it and go together.
                            Err(tokio::spawn(call))
                        } else {
                            Ok(call)
                        }
                    })
                    .collect();
                for task in tasks {
                    match task {
                        Ok(call) => call.await,
                        Err(spawned) => spawned.await.expect("a decision task ran"),
                    }
                    .expect("a decision");
                }
            }
            Step::Batch(hits) => {
                decisions += 1;
                let hits: Vec<Hit<'_>> = hits
                    .iter()
                    .map(|&(key, cost)| Hit::new(KEYS[key], rule, cost))
                    .collect();
                store.acquire_batch(&hits).await.expect("decisions");
            }
        }
        let mut now = Vec::new();
        for key in KEYS {
            let value: Option<Vec<u8>> = conn.get(store.state_key(key, rule)).await.expect("GET");
            now.push(value);
        }
        values.push(now);
    }
    let calls = commands(server, "evalsha");
    // The sequence writes each way an admission or a drop writes.
    for command in ["set", "setrange", "pexpire", "del"] {
        assert!(commands(server, command) > 0, "no {command}");
    }
    if coalesced {
        // Every burst but its first decision goes in one call.
        assert!(
            calls + 40 <= decisions,
            "{calls} calls for {decisions} decisions: the run did not coalesce"
        );
    } else {
        assert_eq!(calls, decisions, "each decision a call of its own");
    }
    values
}

fn clock_now(clock: &ManualClock) -> u64 {
    use slidegate::clock::Clock as _;
    clock.now_micros()
}

/// Calls of `command` the server has answered since its last RESETSTAT.
fn commands(server: &RedisServer, command: &str) -> u64 {
    let stats = server
        .command(&["INFO", "commandstats"])
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

/// After each step that decides, the digest of the five keys' values as
/// the script of 4d6b6f4 wrote them (this test, run with that commit's
/// `store/redis/*.lua`).
const STORED: [u64; 49] = [
    0xd052ccb1ada95504,
    0x1a04fd5b3d47fb88,
    0x141c0cebfb939271,
    0xe504b53da2e915b0,
    0x21eb7a6c8cdd6545,
    0xde4a6aadcd8c9d42,
    0xb42d5e0e6ed67c83,
    0x5255b701c67f1c12,
    0x9dc6dbc6d2afdc61,
    0x1546d3661f4b4fa0,
    0xee2ed9f6c84e4d8f,
    0x1cb02211dd33d72b,
    0x61da3f10d18e7ecb,
    0xb3a6847448272e73,
    0xa45eddbacb2d7737,
    0x090c70dcbb4e3e36,
    0x11513091c1608ab1,
    0x303b9cf92a4f25b4,
    0xf1cc0e37fa2f798b,
    0xe906d92c3053da86,
    0x128ba9853d5ac345,
    0x2f852ba5794211e2,
    0xc81bc5613823b85d,
    0x4a4e518ab5452054,
    0x9d2e198fed9cfe77,
    0x3f5a095e05a5ecb9,
    0x12eba95483ae5bc0,
    0x19cc2c8896892fe9,
    0xee1225befc39b901,
    0xeb3c322a73e6ccf7,
    0x4be472a6742fbb7d,
    0xbfbdced03f572691,
    0xb6c5cff1f7b87da0,
    0x5b97074f3d85071a,
    0x1e75eae308847664,
    0x95f2fe67a536ffa8,
    0x6b617c8de013128a,
    0x76e8aef7a4b4714c,
    0xd4b9cff0ded52434,
    0xaaf641a811740d93,
    0x6c0d8910ca2d90bd,
    0x059e58d5f771a410,
    0xbdf1aa473649bc93,
    0xe7ea519ad3d79b36,
    0x37c9974fb277b6ae,
    0xadb08185349b9c91,
    0x248ba1f338d9d9b1,
    0x7cd25bb4982c3768,
    0x92f0fea23dd435aa,
];

/// The header's `i`th double of a log: H, o1, T1, nt, nT, s, e, exp from
/// 0 (see `sliding_log.lua`).
fn header(log: &[u8], i: usize) -> f64 {
    let at = log.len() - 72 + 1 + i * 8;
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&log[at..at + 8]);
    f64::from_le_bytes(bytes)
}

fn hex(value: &Option<Vec<u8>>) -> String {
    match value {
        Some(v) => v.iter().map(|b| format!("{b:02x}")).collect(),
        None => "(none)".to_owned(),
    }
}

#[tokio::test]
async fn admissions_drops_compactions_and_expiry_moves_store_the_bytes_the_previous_script_stored()
{
    let server = RedisServer::start();
    let alone = run(&server, false).await;
    let coalesced = run(&server, true).await;
    let digests: Vec<u64> = alone.iter().map(|values| digest(values)).collect();
    // Key a's log was compacted: its first live record went from 64 bytes
    // in or more back to the start.
    let starts: Vec<f64> = alone
        .iter()
        .filter_map(|values| values[0].as_deref().map(|log| header(log, 5)))
        .collect();
    assert!(
        starts.windows(2).any(|w| w[0] >= 64.0 && w[1] == 0.0),
        "key a was never compacted: {starts:?}"
    );
    // A denial dropped records of key d: its header changed, its newest
    // total did not.
    let d: Vec<&[u8]> = alone
        .iter()
        .filter_map(|values| values[3].as_deref())
        .collect();
    assert!(
        d.windows(2)
            .any(|w| w[0] != w[1] && header(w[0], 4) == header(w[1], 4)),
        "no denial dropped records of key d"
    );
    for (step, (a, c)) in alone.iter().zip(&coalesced).enumerate() {
        for (key, (a, c)) in KEYS.iter().zip(a.iter().zip(c)) {
            assert_eq!(
                hex(a),
                hex(c),
                "step {step}, key {key}: alone (left) and coalesced (right) differ"
            );
        }
    }
    if digests[..] != STORED[..] {
        let first = digests
            .iter()
            .zip(&STORED)
            .position(|(got, want)| got != want)
            .unwrap_or(digests.len().min(STORED.len()));
        let shown: Vec<String> = KEYS
            .iter()
            .zip(&alone[first.min(alone.len() - 1)])
            .map(|(key, value)| format!("{key}: {}", hex(value)))
            .collect();
        panic!(
            "the stored bytes differ from the previous script's from step {first} on \
             ({} steps, {} recorded); the values at that step:\n{}\nthe digests:\n{digests:#018x?}",
            digests.len(),
            STORED.len(),
            shown.join("\n"),
        );
    }
}
