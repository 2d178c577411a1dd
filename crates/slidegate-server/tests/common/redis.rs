//! Real `redis-server` processes for the server's tests, including the
//! faults: a node that can be SIGKILLed and restarted on the same port with
//! the same data directory, a local Redis Cluster with or without
//! replicas, and a master with a replica watched by three sentinels. No
//! Docker, no mocks. Without `redis-server` the tests fail and say how to
//! install it.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const INSTALL_HINT: &str = "redis-server and redis-cli are needed for the Redis tests: \
     install them (Debian/Ubuntu: `apt-get install redis-server`; macOS: `brew install redis`)";

/// How long a node or a cluster may take to come up.
const STARTUP: Duration = Duration::from_secs(20);

/// How many free ports a node is started on before a test gives up
/// (another test takes one in between rarely; five in a row would be a
/// broken machine).
const PORT_ATTEMPTS: usize = 5;

/// One `redis-server`, killed when dropped.
pub struct Redis {
    child: Option<Child>,
    port: u16,
    args: Vec<String>,
    dir: tempfile::TempDir,
    /// A sentinel's configuration file (it rewrites it as it learns).
    sentinel_conf: Option<std::path::PathBuf>,
}

impl Redis {
    /// A plain node on a free port.
    pub fn start() -> Redis {
        Redis::start_with(&[])
    }

    /// A node on a free port with extra `redis-server` options.
    pub fn start_with(extra: &[&str]) -> Redis {
        Redis::start_on_a_free_port(false, extra)
    }

    /// A node on a free port (a cluster node on one whose bus port is free
    /// too). A port is free only when it is found: a test running in
    /// parallel can bind it before this node does, which then exits at
    /// once; it is started again on another port.
    fn start_on_a_free_port(with_bus: bool, extra: &[&str]) -> Redis {
        for _ in 0..PORT_ATTEMPTS {
            let mut redis = Redis::node(free_port(with_bus), extra);
            if redis.spawn() {
                return redis;
            }
        }
        panic!("redis-server found its port taken {PORT_ATTEMPTS} times in a row")
    }

    /// A node on `port` (one a server was told to use before it existed:
    /// keep it reserved with [`ReservedPort`] until then).
    pub fn start_on(port: u16, extra: &[&str]) -> Redis {
        let mut redis = Redis::node(port, extra);
        assert!(redis.spawn(), "port {port} was taken by another process");
        redis
    }

    fn node(port: u16, extra: &[&str]) -> Redis {
        Redis {
            child: None,
            port,
            args: extra.iter().map(|s| (*s).to_owned()).collect(),
            dir: tempfile::tempdir().expect("a temporary directory"),
            sentinel_conf: None,
        }
    }

    /// A sentinel (`redis-server sentinel.conf --sentinel`) on a free port,
    /// watching the master on `master_port` under [`MASTER_NAME`] with a
    /// quorum of 2, and declaring it down after 1 s without an answer.
    pub fn start_sentinel(master_port: u16) -> Redis {
        for _ in 0..PORT_ATTEMPTS {
            let mut sentinel = Redis::sentinel(free_port(false), master_port);
            if sentinel.spawn() {
                return sentinel;
            }
        }
        panic!("redis-server --sentinel found its port taken {PORT_ATTEMPTS} times in a row")
    }

    fn sentinel(port: u16, master_port: u16) -> Redis {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                 sentinel failover-timeout {MASTER_NAME} 2000\n\
                 sentinel parallel-syncs {MASTER_NAME} 1\n",
                dir = dir.path().display()
            ),
        )
        .expect("write sentinel.conf");
        Redis {
            child: None,
            port,
            args: Vec::new(),
            dir,
            sentinel_conf: Some(conf),
        }
    }

    /// Starts the process and waits until it answers; false when it exited
    /// first (its port was taken). The answer must come from this process
    /// (`process_id` of `INFO server`), not from another one on the port.
    fn spawn(&mut self) -> bool {
        let mut command = Command::new("redis-server");
        match &self.sentinel_conf {
            Some(conf) => command.arg(conf).arg("--sentinel"),
            None => command
                .args(["--port", &self.port.to_string()])
                .args(["--bind", "127.0.0.1", "--save", ""])
                .arg("--dir")
                .arg(self.dir.path()),
        };
        let child = command
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server ({e}): {INSTALL_HINT}"));
        let ours = format!("process_id:{}\r\n", child.id());
        self.child = Some(child);
        let start = Instant::now();
        loop {
            let exited = self
                .child
                .as_mut()
                .is_some_and(|c| c.try_wait().ok().flatten().is_some());
            if exited {
                self.child = None;
                return false;
            }
            if self.ping()
                && self
                    .command(&["INFO", "server"])
                    .is_ok_and(|info| text_of(&info).contains(&ours))
            {
                return true;
            }
            assert!(
                start.elapsed() < STARTUP,
                "redis-server on port {} never answered PING",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `redis://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    /// True while the process runs.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL: no shutdown, no goodbye to clients. Returns once the
    /// process is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL redis-server");
            child.wait().expect("reap redis-server");
        }
    }

    /// Starts the process again on the same port, with the same options
    /// and data directory, and returns once it answers PING.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart a running redis-server");
        assert!(
            self.spawn(),
            "port {} was taken by another process while redis-server was down",
            self.port
        );
    }

    /// True when it answers PING now.
    pub fn ping(&self) -> bool {
        matches!(self.command(&["PING"]), Ok(redis::Value::SimpleString(s)) if s == "PONG")
    }

    /// Runs one command on its own connection.
    pub fn command(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let client = redis::Client::open(self.url())?;
        let mut connection = client.get_connection_with_timeout(Duration::from_secs(2))?;
        connection.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut connection)
    }

    /// One command whose reply is text (status, bulk string or integer).
    pub fn text(&self, args: &[&str]) -> String {
        match self.command(args) {
            Ok(redis::Value::SimpleString(s)) => s,
            Ok(redis::Value::Okay) => "OK".into(),
            Ok(redis::Value::Int(i)) => i.to_string(),
            Ok(redis::Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
            Ok(redis::Value::VerbatimString { text, .. }) => text,
            other => panic!("{args:?} on {}: {other:?}", self.addr()),
        }
    }

    fn wait_until(&self, what: &str, ready: impl Fn(&Redis) -> bool) {
        let start = Instant::now();
        while !ready(self) {
            assert!(
                start.elapsed() < STARTUP,
                "redis-server on port {} never {what}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The name the sentinels of [`Sentinels`] monitor their master under.
pub const MASTER_NAME: &str = "mymaster";

/// A master, one replica, and three sentinels watching them (see
/// [`Redis::start_sentinel`]).
pub struct Sentinels {
    pub master: Redis,
    pub replica: Redis,
    pub sentinels: Vec<Redis>,
}

impl Sentinels {
    /// Starts the five processes and waits until the replica follows the
    /// master and every sentinel knows the replica and the two others (so
    /// that they can agree on a failover at once).
    pub fn start() -> Sentinels {
        let master = Redis::start();
        let replica = Redis::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
        replica.wait_until("follows its master", |r| {
            text_of(
                &r.command(&["INFO", "replication"])
                    .unwrap_or(redis::Value::Nil),
            )
            .contains("master_link_status:up")
        });
        let sentinels: Vec<Redis> = (0..3).map(|_| Redis::start_sentinel(master.port)).collect();
        for sentinel in &sentinels {
            sentinel.wait_until("knows the replica and the other sentinels", |s| {
                let Ok(redis::Value::Array(fields)) =
                    s.command(&["SENTINEL", "MASTER", MASTER_NAME])
                else {
                    return false;
                };
                let fields: Vec<String> = fields.iter().map(text_of).collect();
                let field = |name: &str| {
                    let at = fields.iter().position(|f| f == name)?;
                    fields.get(at + 1).cloned()
                };
                field("num-slaves").as_deref() == Some("1")
                    && field("num-other-sentinels").as_deref() == Some("2")
            });
        }
        Sentinels {
            master,
            replica,
            sentinels,
        }
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/mymaster`
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(Redis::addr).collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","))
    }

    /// True when the replica says it is a master now.
    pub fn replica_promoted(&self) -> bool {
        self.replica
            .command(&["INFO", "replication"])
            .is_ok_and(|v| text_of(&v).contains("role:master"))
    }

    /// How many sentinels name the replica as the master (slidegate
    /// follows it once a majority, two of three, do).
    pub fn naming_the_replica(&self) -> usize {
        self.sentinels
            .iter()
            .filter(|s| {
                matches!(
                    s.command(&["SENTINEL", "get-master-addr-by-name", MASTER_NAME]),
                    Ok(redis::Value::Array(addr))
                        if addr.get(1).map(text_of) == Some(self.replica.port.to_string())
                )
            })
            .count()
    }
}

/// A local Redis Cluster: `masters` masters, each with `replicas` replicas.
pub struct Cluster {
    pub nodes: Vec<Redis>,
}

impl Cluster {
    /// Starts the nodes (`cluster-node-timeout` in milliseconds), joins
    /// them with `redis-cli --cluster create`, and waits until every node
    /// says `cluster_state:ok` and every replica follows its master.
    pub fn start(masters: usize, replicas: usize, node_timeout_ms: u64) -> Cluster {
        Cluster::start_with(masters, replicas, node_timeout_ms, &[])
    }

    /// The same, with extra `redis-server` options on every node.
    pub fn start_with(
        masters: usize,
        replicas: usize,
        node_timeout_ms: u64,
        extra: &[&str],
    ) -> Cluster {
        let mut nodes = Vec::new();
        for _ in 0..masters * (1 + replicas) {
            // Each node keeps its nodes.conf in a directory of its own.
            let timeout = node_timeout_ms.to_string();
            let mut args = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                &timeout,
                "--appendonly",
                "no",
            ];
            args.extend_from_slice(extra);
            nodes.push(Redis::start_on_a_free_port(true, &args));
        }
        let addresses: Vec<String> = nodes.iter().map(Redis::addr).collect();
        let output = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli ({e}): {INSTALL_HINT}"));
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = Cluster { nodes };
        cluster.wait_until_healthy(masters * (1 + replicas));
        cluster
    }

    /// Waits until every running node sees `cluster_state:ok`, knows
    /// `known` nodes, and every replica's link to its master is up.
    pub fn wait_until_healthy(&self, known: usize) {
        for node in self.nodes.iter().filter(|n| n.is_running()) {
            node.wait_until("joined a healthy cluster", |n| {
                let Ok(info) = n.command(&["CLUSTER", "INFO"]).map(|v| text_of(&v)) else {
                    return false;
                };
                let replication = text_of(
                    &n.command(&["INFO", "replication"])
                        .unwrap_or(redis::Value::Nil),
                );
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{known}"))
                    && (replication.contains("role:master")
                        || replication.contains("master_link_status:up"))
            });
        }
    }

    /// `redis+cluster://` with every node's address.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(Redis::addr).collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// The running node that serves `slot` as a master now, if any.
    pub fn master_of(&self, slot: u16) -> Option<usize> {
        self.nodes.iter().position(|n| {
            n.is_running()
                && n.command(&["INFO", "replication"])
                    .is_ok_and(|v| text_of(&v).contains("role:master"))
                && owns_slot(n, slot)
        })
    }
}

/// True when `node`'s own line of `CLUSTER NODES` lists a range holding `slot`.
fn owns_slot(node: &Redis, slot: u16) -> bool {
    let Ok(nodes) = node.command(&["CLUSTER", "NODES"]) else {
        return false;
    };
    let nodes = text_of(&nodes);
    let Some(myself) = nodes.lines().find(|l| l.contains("myself")) else {
        return false;
    };
    myself.split(' ').skip(8).any(|range| {
        let (low, high) = range.split_once('-').unwrap_or((range, range));
        matches!((low.parse::<u16>(), high.parse::<u16>()), (Ok(l), Ok(h)) if (l..=h).contains(&slot))
    })
}

/// The text of a status, bulk or verbatim reply; empty otherwise.
pub fn text_of(value: &redis::Value) -> String {
    match value {
        redis::Value::SimpleString(s) => s.clone(),
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        redis::Value::VerbatimString { text, .. } => text.clone(),
        _ => String::new(),
    }
}

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash tag, or of
/// the whole key, modulo 16384.
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

/// A port bound by this test and not listening: a connection to it is
/// refused, and no other process can take it (as a port found free and
/// let go can be) until the reservation is dropped.
pub struct ReservedPort {
    socket: tokio::net::TcpSocket,
    port: u16,
}

impl ReservedPort {
    /// Binds a free port (without `SO_REUSEADDR`, so that nothing else can
    /// bind it) and never listens on it.
    pub fn new() -> ReservedPort {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket
            .bind(([127, 0, 0, 1], 0).into())
            .expect("bind a free port");
        let port = socket.local_addr().expect("a local address").port();
        ReservedPort { socket, port }
    }

    /// The port held.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Lets the port go and returns it (to start a node on it at once).
    pub fn release(self) -> u16 {
        drop(self.socket);
        self.port
    }
}

/// A port that is free now (and, for a cluster node, whose bus port
/// `port + 10000` is free too).
pub fn free_port(with_bus: bool) -> u16 {
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
