//! Real Redis servers for tests: one `redis-server` on a free port, a
//! local 3-master Redis Cluster, or a master with a replica watched by three
//! sentinels, each killed by PID when dropped. No Docker, no mocks. Without `redis-server` the tests fail and say how to
//! install it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const INSTALL_HINT: &str = "redis-server and redis-cli are needed for the Redis store tests: \
     install them (Debian/Ubuntu: `apt-get install redis-server`; macOS: `brew install redis`)";

/// How many free ports a server is started on before a test gives up
/// (another test takes one in between rarely; five in a row would be a
/// broken machine).
const PORT_ATTEMPTS: usize = 5;

/// One `redis-server` process.
pub struct RedisServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
    /// Its `requirepass`, sent with `AUTH` before every command of the fixture.
    password: Option<String>,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers PING.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server with extra `redis-server` options.
    pub fn start_with_args(extra: &[&str]) -> RedisServer {
        RedisServer::start_with(extra)
    }

    /// Starts a server on a free port (a cluster node on one whose bus port
    /// is free too), on another one when the port was taken in between.
    fn start_with(extra: &[&str]) -> RedisServer {
        let password = extra
            .windows(2)
            .find(|w| w[0] == "--requirepass")
            .map(|w| w[1]);
        let cluster = extra.contains(&"--cluster-enabled");
        RedisServer::start_on_a_free_port(cluster, password, |port, dir| {
            let mut command = Command::new("redis-server");
            command
                .args(["--port", &port.to_string()])
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .arg("--dir")
                .arg(dir)
                .args(extra);
            command
        })
    }

    /// Runs `command(port, directory)` on free ports until a server comes
    /// up on its own port. A port is free only when it is found: a test
    /// running in parallel can bind it before this server does, which then
    /// exits at once, while a PING would be answered by the other test's
    /// server.
    fn start_on_a_free_port(
        with_bus: bool,
        password: Option<&str>,
        command: impl Fn(u16, &Path) -> Command,
    ) -> RedisServer {
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port(with_bus);
            let dir = tempfile::tempdir().expect("a temporary directory");
            let child = command(port, dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start redis-server ({e}): {INSTALL_HINT}"));
            let mut server = RedisServer {
                child,
                port,
                _dir: dir,
                password: password.map(str::to_owned),
            };
            if server.came_up() {
                return server;
            }
        }
        panic!("redis-server found its port taken {PORT_ATTEMPTS} times in a row")
    }

    /// Waits until this process answers PING, or returns false once it
    /// has exited (its port was taken). The answer must come from this
    /// process (`process_id` of `INFO server`), not from another server
    /// that took the port.
    fn came_up(&mut self) -> bool {
        let start = Instant::now();
        loop {
            if self.child.try_wait().ok().flatten().is_some() {
                return false;
            }
            let ours = format!("process_id:{}\r\n", self.child.id());
            if self.command(&["PING"]).as_deref() == Some("PONG")
                && self
                    .command(&["INFO", "server"])
                    .is_some_and(|info| info.contains(&ours))
            {
                return true;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis-server on port {} did not come up",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs one command and returns its reply as text (simple, integer or
    /// bulk string), or `None` on an error reply.
    pub fn command(&self, args: &[&str]) -> Option<String> {
        command_as(self.port, self.password.as_deref(), args)
    }

    fn wait_for(&self, ready: impl Fn() -> bool) {
        let start = Instant::now();
        while !ready() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis-server on port {} did not come up",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A local Redis Cluster of three masters, no replicas.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers, joins them with
    /// `redis-cli --cluster create` and waits for `cluster_state:ok`.
    pub fn start() -> RedisCluster {
        RedisCluster::start_with(&[])
    }

    /// The same, with extra `redis-server` options on every node.
    pub fn start_with(extra: &[&str]) -> RedisCluster {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            // Each node has a directory of its own for its nodes.conf.
            let mut args = vec!["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"];
            args.extend_from_slice(extra);
            nodes.push(RedisServer::start_with(&args));
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let status = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("cannot run redis-cli ({e}): {INSTALL_HINT}"));
        assert!(status.success(), "redis-cli --cluster create failed");
        for node in &nodes {
            node.wait_for(|| {
                command(node.port, &["CLUSTER", "INFO"])
                    .is_some_and(|info| info.contains("cluster_state:ok"))
            });
        }
        RedisCluster { nodes }
    }

    /// The node that serves `slot` (by `CLUSTER NODES`), if any.
    pub fn master_of(&self, slot: u16) -> Option<&RedisServer> {
        let nodes = self.nodes.first()?.command(&["CLUSTER", "NODES"])?;
        let port = nodes.lines().find_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let serves = fields.iter().skip(8).any(|range| {
                let (low, high) = range.split_once('-').unwrap_or((range, range));
                matches!((low.parse::<u16>(), high.parse::<u16>()), (Ok(l), Ok(h)) if (l..=h).contains(&slot))
            });
            let address = fields.get(1)?.split('@').next()?;
            serves.then(|| address.rsplit_once(':')?.1.parse::<u16>().ok())?
        })?;
        self.nodes.iter().find(|n| n.port() == port)
    }

    /// `redis://127.0.0.1:P` of every node.
    pub fn node_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }
}

/// The name the sentinels of [`SentinelGroup`] monitor their master under.
pub const MASTER_NAME: &str = "mymaster";

/// A master, one replica and three sentinels (quorum 2) watching them:
/// `redis-server sentinel.conf --sentinel`, the master declared down after
/// `down-after-milliseconds` 1000.
pub struct SentinelGroup {
    pub master: RedisServer,
    pub replica: RedisServer,
    pub sentinels: Vec<RedisServer>,
}

impl SentinelGroup {
    /// Starts the five processes and waits until every sentinel knows the
    /// replica and the two other sentinels (so that a failover can be
    /// agreed on at once).
    pub fn start() -> SentinelGroup {
        SentinelGroup::start_with_passwords(None, None)
    }

    /// The same, with `requirepass` on the master and the replica
    /// (`master`) and on the sentinels (`sentinels`).
    pub fn start_with_passwords(
        master_password: Option<&str>,
        sentinel_password: Option<&str>,
    ) -> SentinelGroup {
        let auth: Vec<&str> = master_password
            .map(|p| vec!["--requirepass", p, "--masterauth", p])
            .unwrap_or_default();
        let master = RedisServer::start_with(&auth);
        let port = master.port().to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", &port];
        args.extend_from_slice(&auth);
        let replica = RedisServer::start_with_args(&args);
        replica.wait_for(|| {
            replica
                .command(&["INFO", "replication"])
                .is_some_and(|info| info.contains("master_link_status:up"))
        });
        let sentinels: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::start_sentinel(master.port(), master_password, sentinel_password))
            .collect();
        for sentinel in &sentinels {
            sentinel.wait_for(|| {
                let known = |field: &str| {
                    command_fields(sentinel, &["SENTINEL", "MASTER", MASTER_NAME]).and_then(
                        |fields| {
                            let at = fields.iter().position(|f| f == field)?;
                            fields.get(at + 1)?.parse::<u32>().ok()
                        },
                    )
                };
                known("num-slaves") == Some(1) && known("num-other-sentinels") == Some(2)
            });
        }
        SentinelGroup {
            master,
            replica,
            sentinels,
        }
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/mymaster`
    pub fn url(&self) -> String {
        format!("redis+sentinel://{}/{MASTER_NAME}", self.hosts())
    }

    /// `127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3`
    pub fn hosts(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        hosts.join(",")
    }

    /// How many of the sentinels name the node on `port` as the master now.
    pub fn naming(&self, port: u16) -> usize {
        self.sentinels
            .iter()
            .filter(|s| {
                command_fields(s, &["SENTINEL", "get-master-addr-by-name", MASTER_NAME])
                    .is_some_and(|addr| addr.get(1).is_some_and(|p| *p == port.to_string()))
            })
            .count()
    }

    /// The port of the master the sentinels name now.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            command_fields(s, &["SENTINEL", "get-master-addr-by-name", MASTER_NAME])?
                .get(1)?
                .parse()
                .ok()
        })
    }
}

impl RedisServer {
    /// A sentinel on a free port, monitoring the master on `master_port`
    /// (with its password), itself behind `password`.
    pub fn start_sentinel(
        master_port: u16,
        master_password: Option<&str>,
        password: Option<&str>,
    ) -> RedisServer {
        let mut auth = String::new();
        if let Some(master) = master_password {
            auth.push_str(&format!("sentinel auth-pass {MASTER_NAME} {master}\n"));
        }
        if let Some(password) = password {
            auth.push_str(&format!(
                "requirepass {password}\nsentinel sentinel-pass {password}\n"
            ));
        }
        RedisServer::start_on_a_free_port(false, password, |port, dir| {
            let conf = dir.join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                     sentinel failover-timeout {MASTER_NAME} 2000\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n{auth}",
                    dir = dir.display()
                ),
            )
            .expect("write sentinel.conf");
            let mut command = Command::new("redis-server");
            command.arg(&conf).arg("--sentinel");
            command
        })
    }

    /// How many times each command was called (or refused) since the
    /// server started or `CONFIG RESETSTAT`, by `INFO commandstats`
    /// (`"auth"`, `"evalsha"`, `"script|load"`…). The fixture's own `AUTH`
    /// before this `INFO` is counted.
    pub fn commands_received(&self) -> std::collections::BTreeMap<String, u64> {
        let info = self
            .command(&["INFO", "commandstats"])
            .expect("INFO commandstats");
        info.lines()
            .filter_map(|line| {
                let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let count = |field: &str| {
                    stats.split(',').find_map(|kv| {
                        let (k, v) = kv.split_once('=')?;
                        (k == field).then(|| v.parse::<u64>().ok())?
                    })
                };
                let total = count("calls")? + count("rejected_calls").unwrap_or(0);
                Some((name.to_owned(), total))
            })
            .collect()
    }

    /// SIGKILL now, and wait until the process is gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port that is free now (and, for a cluster node, whose bus port
/// `port + 10000` is free too).
fn free_port(with_bus: bool) -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let port = listener.local_addr().expect("a local address").port();
        if !with_bus {
            return port;
        }
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// The Redis Cluster slot of `key`, as `CLUSTER KEYSLOT` computes it:
/// CRC16 (XMODEM) of its hash tag, or of the whole key, modulo 16384.
pub fn key_slot(key: &str) -> u16 {
    let tagged = slidegate::store::slot_key(key);
    let mut crc: u16 = 0;
    for byte in tagged.bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16_384
}

/// Runs one command on the server at `port` (see [`RedisServer::command`]),
/// from any thread.
pub fn command_on(port: u16, args: &[&str]) -> Option<String> {
    command(port, args)
}

/// Returns once the server on `port` stops answering a PING within 20 ms
/// (a `DEBUG SLEEP` sent by another thread has begun), or after 5 s.
/// A test that needs the server asleep waits for it rather than for a
/// fixed time a loaded machine may not honour.
pub fn wait_until_asleep(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
            continue;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(20)));
        if stream.write_all(b"PING\r\n").is_err() {
            continue;
        }
        // Any byte of the answer: awake.
        match stream.read_exact(&mut [0u8; 1]) {
            Ok(()) => std::thread::sleep(Duration::from_millis(2)),
            Err(_) => return,
        }
    }
}

/// Runs one command whose reply is an array (of strings, or of arrays of
/// them) and returns its strings, flattened; `None` on an error or nil.
fn command_fields(server: &RedisServer, args: &[&str]) -> Option<Vec<String>> {
    let mut reader = send(server.port, server.password.as_deref(), args)?;
    let mut fields = Vec::new();
    let mut pending = 1usize;
    while pending > 0 {
        pending -= 1;
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        match line.split_at_checked(1)? {
            ("*", count) => pending += count.parse::<usize>().ok()?,
            ("+" | ":", rest) => fields.push(rest.to_owned()),
            ("$", len) => {
                let len: usize = len.parse().ok()?;
                let mut body = vec![0; len + 2];
                reader.read_exact(&mut body).ok()?;
                body.truncate(len);
                fields.push(String::from_utf8(body).ok()?);
            }
            _ => return None,
        }
    }
    Some(fields)
}

/// Sends `args` (after `AUTH password`, whose reply is read) and returns
/// the reader of the reply.
fn send(port: u16, password: Option<&str>, args: &[&str]) -> Option<BufReader<TcpStream>> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut request = String::new();
    let auth = password.map(|p| ["AUTH", p]);
    for command in auth.iter().map(|a| &a[..]).chain([args]) {
        request.push_str(&format!("*{}\r\n", command.len()));
        for arg in command {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
    }
    stream.write_all(request.as_bytes()).ok()?;
    let mut reader = BufReader::new(stream);
    if password.is_some() {
        let mut ok = String::new();
        reader.read_line(&mut ok).ok()?;
        if !ok.starts_with("+OK") {
            return None;
        }
    }
    Some(reader)
}

/// A minimal RESP client, enough to wait for a server without the crate
/// under test.
fn command(port: u16, args: &[&str]) -> Option<String> {
    command_as(port, None, args)
}

/// [`command`] after `AUTH password`.
fn command_as(port: u16, password: Option<&str>, args: &[&str]) -> Option<String> {
    let mut reader = send(port, password, args)?;
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let line = line.trim_end();
    match line.split_at_checked(1)? {
        ("+" | ":", rest) => Some(rest.to_owned()),
        ("$", len) => {
            let len: usize = len.parse().ok()?;
            let mut body = vec![0; len + 2];
            reader.read_exact(&mut body).ok()?;
            body.truncate(len);
            String::from_utf8(body).ok()
        }
        _ => None,
    }
}

/// A Redis store on `url` deciding on `clock` (the client's clock, as the
/// memory store it is compared with), keeping idle keys an hour (as the
/// memory store keeps states when it is not swept), with a generous call
/// timeout: what the property tests compare.
#[cfg(feature = "redis")]
pub fn store_on_clock(
    runtime: &tokio::runtime::Runtime,
    url: String,
    clock: &slidegate::clock::ManualClock,
) -> slidegate::RedisStore {
    runtime
        .block_on(
            slidegate::RedisStore::builder(url)
                .client_clock(clock.clone())
                .expiry_margin(Duration::from_secs(3600))
                .timeout(Duration::from_secs(5))
                .build(),
        )
        .expect("the Redis store connects")
}
