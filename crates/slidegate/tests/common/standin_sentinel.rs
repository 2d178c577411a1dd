//! A stand-in for a Redis sentinel: a TCP server speaking enough of the
//! protocol (RESP) to answer `SENTINEL get-master-addr-by-name` with the
//! node the test tells it to name, so that sentinels can be made to
//! disagree, or to change their minds, at the moment a test chooses. Real
//! sentinels only do that through a failover.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One stand-in sentinel, listening on a free loopback port until dropped.
pub struct StandInSentinel {
    port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    /// The port of the node it names (on 127.0.0.1), or `None`: it knows
    /// no such master.
    names: Mutex<Option<u16>>,
    /// How many times it was asked for the master.
    asked: AtomicU64,
    stop: AtomicBool,
}

impl StandInSentinel {
    /// Starts one naming the node on `port` (on 127.0.0.1).
    pub fn naming(port: u16) -> StandInSentinel {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let own_port = listener.local_addr().expect("a local address").port();
        let shared = Arc::new(Shared {
            names: Mutex::new(Some(port)),
            asked: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let accepting = Arc::clone(&shared);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if accepting.stop.load(Ordering::Acquire) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let serving = Arc::clone(&accepting);
                std::thread::spawn(move || serve(stream, &serving));
            }
        });
        StandInSentinel {
            port: own_port,
            shared,
        }
    }

    /// `127.0.0.1:PORT` of the stand-in itself.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// From now on, names the node on `port`.
    pub fn name(&self, port: u16) {
        *self.shared.names.lock().expect("the lock") = Some(port);
    }

    /// How many times it was asked for the master so far.
    pub fn asked(&self) -> u64 {
        self.shared.asked.load(Ordering::Acquire)
    }

    /// Returns once it has been asked `more` times after `since` (a count
    /// of [`asked`](Self::asked)), panicking after `deadline`.
    pub fn wait_asked(&self, since: u64, more: u64, deadline: Duration) {
        let start = Instant::now();
        while self.asked() < since + more {
            assert!(
                start.elapsed() < deadline,
                "stand-in sentinel {} asked {} times, not {more} more than {since}",
                self.addr(),
                self.asked()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for StandInSentinel {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // Wakes the accepting thread, which then sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Answers the commands of one connection until it closes.
fn serve(stream: TcpStream, shared: &Shared) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    while let Some(command) = read_command(&mut reader) {
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let upper: Vec<String> = command.iter().map(|a| a.to_ascii_uppercase()).collect();
        let reply = match upper.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["SENTINEL", "GET-MASTER-ADDR-BY-NAME", _] => {
                shared.asked.fetch_add(1, Ordering::AcqRel);
                match *shared.names.lock().expect("the lock") {
                    Some(port) => {
                        let port = port.to_string();
                        format!("*2\r\n$9\r\n127.0.0.1\r\n${}\r\n{port}\r\n", port.len())
                    }
                    None => "*-1\r\n".to_owned(),
                }
            }
            ["PING", ..] => "+PONG\r\n".to_owned(),
            ["AUTH", ..] | ["CLIENT", ..] => "+OK\r\n".to_owned(),
            _ => "-ERR unknown command\r\n".to_owned(),
        };
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// One command as RESP sends it (an array of bulk strings), or `None` at
/// the end of the connection or on anything else.
fn read_command(reader: &mut BufReader<TcpStream>) -> Option<Vec<String>> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let count: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(count.min(16));
    for _ in 0..count {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut body = vec![0; len.checked_add(2)?];
        reader.read_exact(&mut body).ok()?;
        body.truncate(len);
        args.push(String::from_utf8(body).ok()?);
    }
    Some(args)
}
