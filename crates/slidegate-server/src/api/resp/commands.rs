//! The commands of the RESP port, one connection's session at a time:
//! slidegate's own (`SG.ACQUIRE`, `SG.PEEK`, `SG.RESET`), redis-cell's
//! `CL.THROTTLE`, and what client libraries send on connect.

use std::time::Duration;

use slidegate::{Algorithm, Decision, Rate, Rule, Store};

use super::args::{self, is, wrong_arity};
use super::reply::{Protocol, Replies};
use super::state::RespState;
use super::throttle::Throttle;

/// What the connection does after a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Reads the next command.
    Continue,
    /// Sends the replies, then closes (`QUIT`).
    Close,
}

/// One connection's state: its protocol, its name, whether it sent the
/// admin token.
pub struct Session<S> {
    state: RespState<S>,
    id: u64,
    name: Option<Vec<u8>>,
    admin: bool,
}

/// The most bytes `CLIENT SETNAME` keeps.
const MAX_NAME_BYTES: usize = 256;

impl<S: Store> Session<S> {
    /// A new connection's session.
    pub fn new(state: RespState<S>) -> Session<S> {
        let id = state.next_id();
        Session {
            state,
            id,
            name: None,
            admin: false,
        }
    }

    /// Runs one command (`args[0]` its name, never empty) and writes its
    /// reply.
    pub async fn execute(&mut self, args: &[&[u8]], replies: &mut Replies) -> Flow {
        let name = args[0];
        let result = if is(name, "CL.THROTTLE") {
            self.throttle(args, replies).await
        } else if is(name, "SG.ACQUIRE") {
            self.acquire(args, replies).await
        } else if is(name, "SG.PEEK") {
            self.peek(args, replies).await
        } else if is(name, "SG.RESET") {
            self.reset(args, replies).await
        } else {
            return self.connection_command(args, replies);
        };
        if let Err(error) = result {
            replies.error(&error);
        }
        Flow::Continue
    }

    /// `CL.THROTTLE key max_burst count_per_period period [quantity]`.
    async fn throttle(&self, args: &[&[u8]], replies: &mut Replies) -> Result<(), String> {
        if !(5..=6).contains(&args.len()) {
            return Err(wrong_arity("cl.throttle"));
        }
        let key = args::key(args[1])?;
        let quantity = match args.get(5) {
            Some(arg) => args::integer(arg)?,
            None => 1,
        };
        let throttle = Throttle::new(
            args::integer(args[2])?,
            args::integer(args[3])?,
            args::integer(args[4])?,
            quantity,
            &self.state.bounds,
        )
        .map_err(|e| format!("ERR {e}"))?;
        let limiter = &self.state.limiter;
        let decision = if throttle.never_passes() {
            limiter.throttle_peek(key, throttle.rule).await
        } else {
            limiter
                .throttle(key, throttle.rule, throttle.quantity)
                .await
        }
        .map_err(store_error)?;
        replies.integers(&throttle.reply(&decision));
        Ok(())
    }

    /// `SG.ACQUIRE key limit window_ms [COST n] [ALGORITHM a]`.
    async fn acquire(&self, args: &[&[u8]], replies: &mut Replies) -> Result<(), String> {
        let (key, rule, cost) = self.rule_args(args, "sg.acquire", true)?;
        let answer = self
            .state
            .limiter
            .acquire(key, &[rule], cost)
            .await
            .map_err(store_error)?;
        replies.integers(&decision_reply(&answer.decision));
        Ok(())
    }

    /// `SG.PEEK key limit window_ms [ALGORITHM a]`.
    async fn peek(&self, args: &[&[u8]], replies: &mut Replies) -> Result<(), String> {
        let (key, rule, _) = self.rule_args(args, "sg.peek", false)?;
        let answer = self
            .state
            .limiter
            .peek(key, rule)
            .await
            .map_err(store_error)?;
        replies.integers(&decision_reply(&answer.decision));
        Ok(())
    }

    /// `SG.RESET key`: only after `AUTH` with the admin token.
    async fn reset(&self, args: &[&[u8]], replies: &mut Replies) -> Result<(), String> {
        if self.state.admin_token.is_none() {
            return Err(
                "ERR SG.RESET is disabled: start the server with --admin-token to enable it".into(),
            );
        }
        if !self.admin {
            return Err("NOAUTH Authentication required.".into());
        }
        if args.len() != 2 {
            return Err(wrong_arity("sg.reset"));
        }
        let key = args::key(args[1])?;
        self.state.limiter.reset(key).await.map_err(store_error)?;
        replies.simple("OK");
        Ok(())
    }

    /// The key, the rule and the cost of `SG.ACQUIRE` (`with_cost`) or
    /// `SG.PEEK`, within the request bounds.
    fn rule_args<'a>(
        &self,
        args: &[&'a [u8]],
        name: &str,
        with_cost: bool,
    ) -> Result<(&'a str, Rule, u64), String> {
        if args.len() < 4 {
            return Err(wrong_arity(name));
        }
        let key = args::key(args[1])?;
        let bounds = &self.state.bounds;
        let max_limit = bounds.max_adhoc_limit.min(Rate::MAX_LIMIT);
        let limit = u64::try_from(args::integer(args[2])?)
            .ok()
            .filter(|l| (1..=max_limit).contains(l))
            .ok_or_else(|| {
                format!(
                    "ERR limit must be a whole number from 1 to {max_limit} (--max-adhoc-limit)"
                )
            })?;
        let max_window = bounds.max_adhoc_window.min(Rate::MAX_WINDOW);
        let window = u64::try_from(args::integer(args[3])?)
            .ok()
            .filter(|w| *w >= 1)
            .map(Duration::from_millis)
            .filter(|w| *w <= max_window)
            .ok_or_else(|| {
                format!(
                    "ERR window_ms must be a whole number from 1 to {} (--max-adhoc-window)",
                    max_window.as_millis()
                )
            })?;
        let mut cost = None;
        let mut algorithm = None;
        let mut options = args[4..].iter();
        while let Some(option) = options.next() {
            let value = options.next();
            match value {
                Some(value) if with_cost && is(option, "COST") && cost.is_none() => {
                    let n = args::integer(value)?;
                    cost = Some(u64::try_from(n).map_err(|_| "ERR COST must be 0 or more")?);
                }
                Some(value) if is(option, "ALGORITHM") && algorithm.is_none() => {
                    let text = std::str::from_utf8(value).unwrap_or_default();
                    algorithm = Some(text.to_ascii_lowercase().parse::<Algorithm>().map_err(
                        |_| {
                            "ERR unknown algorithm: expected sliding_log, sliding_counter, fixed_window or gcra"
                                .to_owned()
                        },
                    )?);
                }
                _ => {
                    return Err(format!(
                        "ERR syntax error: unexpected '{}' (options: {})",
                        args::shown(option),
                        if with_cost {
                            "COST n, ALGORITHM a"
                        } else {
                            "ALGORITHM a"
                        }
                    ));
                }
            }
        }
        let rate = Rate::new(limit, window).map_err(|e| format!("ERR {e}"))?;
        let rule = Rule::new(rate).with_algorithm(algorithm.unwrap_or_default());
        Ok((key, rule, cost.unwrap_or(1)))
    }

    /// `PING`, `ECHO`, `HELLO`, `AUTH`, `CLIENT`, `SELECT`, `COMMAND`,
    /// `INFO`, `QUIT`, and the error for any other command.
    fn connection_command(&mut self, args: &[&[u8]], replies: &mut Replies) -> Flow {
        let name = args[0];
        let result = if is(name, "PING") {
            match args {
                [_] => {
                    replies.simple("PONG");
                    Ok(())
                }
                [_, message] => {
                    replies.bulk(message);
                    Ok(())
                }
                _ => Err(wrong_arity("ping")),
            }
        } else if is(name, "ECHO") {
            match args {
                [_, message] => {
                    replies.bulk(message);
                    Ok(())
                }
                _ => Err(wrong_arity("echo")),
            }
        } else if is(name, "HELLO") {
            self.hello(args, replies)
        } else if is(name, "AUTH") {
            match args {
                [_, token] | [_, _, token] => self.auth(token).map(|()| {
                    replies.simple("OK");
                }),
                _ => Err(wrong_arity("auth")),
            }
        } else if is(name, "CLIENT") {
            self.client(args, replies)
        } else if is(name, "SELECT") {
            match args {
                [_, db] => match args::integer(db) {
                    Ok(0) => {
                        replies.simple("OK");
                        Ok(())
                    }
                    Ok(_) => Err("ERR DB index is out of range".to_owned()),
                    Err(error) => Err(error),
                },
                _ => Err(wrong_arity("select")),
            }
        } else if is(name, "COMMAND") {
            // No command table: clients use it for hints only.
            match args.get(1) {
                Some(sub) if is(sub, "COUNT") => replies.integer(0),
                _ => replies.array(0),
            }
            Ok(())
        } else if is(name, "INFO") {
            replies.bulk(info().as_bytes());
            Ok(())
        } else if is(name, "QUIT") {
            replies.simple("OK");
            return Flow::Close;
        } else {
            Err(unknown_command(args))
        };
        if let Err(error) = result {
            replies.error(&error);
        }
        Flow::Continue
    }

    /// `HELLO [protover [AUTH username password] [SETNAME clientname]]`.
    fn hello(&mut self, args: &[&[u8]], replies: &mut Replies) -> Result<(), String> {
        let protocol = match args.get(1) {
            None => replies.protocol,
            Some(version) => match args::integer(version) {
                Ok(2) => Protocol::Resp2,
                Ok(3) => Protocol::Resp3,
                Ok(_) => return Err("NOPROTO unsupported protocol version".into()),
                Err(_) => {
                    return Err("ERR Protocol version is not an integer or out of range".into());
                }
            },
        };
        let mut options = args.iter().skip(2);
        let mut name = None;
        while let Some(option) = options.next() {
            if is(option, "AUTH") {
                let (Some(_user), Some(token)) = (options.next(), options.next()) else {
                    return Err("ERR Syntax error in HELLO option 'auth'".into());
                };
                self.auth(token)?;
            } else if is(option, "SETNAME") {
                let Some(value) = options.next() else {
                    return Err("ERR Syntax error in HELLO option 'setname'".into());
                };
                name = Some(client_name(value)?);
            } else {
                return Err(format!(
                    "ERR Syntax error in HELLO option '{}'",
                    args::shown(option)
                ));
            }
        }
        if name.is_some() {
            self.name = name;
        }
        replies.protocol = protocol;
        replies.map(7);
        replies.bulk(b"server");
        replies.bulk(b"slidegate");
        replies.bulk(b"version");
        replies.bulk(env!("CARGO_PKG_VERSION").as_bytes());
        replies.bulk(b"proto");
        replies.integer(match protocol {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        });
        replies.bulk(b"id");
        replies.integer(i64::try_from(self.id).unwrap_or(i64::MAX));
        replies.bulk(b"mode");
        replies.bulk(b"standalone");
        replies.bulk(b"role");
        replies.bulk(b"master");
        replies.bulk(b"modules");
        replies.array(0);
        Ok(())
    }

    /// `AUTH [username] token`: the admin token, compared in constant time.
    fn auth(&mut self, token: &[u8]) -> Result<(), String> {
        let Some(expected) = &self.state.admin_token else {
            return Err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?".into());
        };
        if constant_time_eq(token, expected.as_bytes()) {
            self.admin = true;
            Ok(())
        } else {
            Err("WRONGPASS invalid username-password pair or user is disabled.".into())
        }
    }

    /// `CLIENT SETNAME`, `SETINFO`, `GETNAME`, `ID`.
    fn client(&mut self, args: &[&[u8]], replies: &mut Replies) -> Result<(), String> {
        let Some(sub) = args.get(1) else {
            return Err(wrong_arity("client"));
        };
        match args {
            [_, _, name] if is(sub, "SETNAME") => {
                self.name = Some(client_name(name)?);
                replies.simple("OK");
            }
            [_, _, _, _] if is(sub, "SETINFO") => replies.simple("OK"),
            [_, _] if is(sub, "GETNAME") => match &self.name {
                Some(name) => replies.bulk(name),
                None => replies.null(),
            },
            [_, _] if is(sub, "ID") => replies.integer(i64::try_from(self.id).unwrap_or(i64::MAX)),
            _ if ["SETNAME", "SETINFO", "GETNAME", "ID"]
                .iter()
                .any(|s| is(sub, s)) =>
            {
                return Err(format!(
                    "ERR wrong number of arguments for 'client|{}' command",
                    args::shown(sub).to_ascii_lowercase()
                ));
            }
            _ => {
                return Err(format!(
                    "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                    args::shown(sub)
                ));
            }
        }
        Ok(())
    }
}

/// `[allowed 0|1, limit, remaining, retry_after_ms, reset_after_ms]`,
/// times rounded up to whole milliseconds, `retry_after_ms` 0 when
/// allowed.
pub fn decision_reply(decision: &Decision) -> [i64; 5] {
    let ms = |d: Duration| i64::try_from(d.as_micros().div_ceil(1000)).unwrap_or(i64::MAX);
    let retry = if decision.allowed() {
        0
    } else {
        ms(decision.retry_after())
    };
    [
        i64::from(decision.allowed()),
        i64::try_from(decision.limit()).unwrap_or(i64::MAX),
        i64::try_from(decision.remaining()).unwrap_or(i64::MAX),
        retry,
        ms(decision.reset_after()),
    ]
}

/// A library error as a Redis error reply.
fn store_error(error: slidegate::Error) -> String {
    if error.is_store_failure() {
        tracing::warn!(%error, "store failure");
        format!("ERR store unavailable: {error}")
    } else {
        format!("ERR {error}")
    }
}

/// Redis's reply to a command it does not know.
fn unknown_command(args: &[&[u8]]) -> String {
    let mut text = format!(
        "ERR unknown command '{}', with args beginning with: ",
        args::shown(args[0])
    );
    for arg in args.iter().skip(1).take(8) {
        text.push('\'');
        text.push_str(&args::shown(arg));
        text.push_str("' ");
    }
    text
}

/// A `CLIENT SETNAME` name: Redis refuses spaces and newlines in it.
fn client_name(name: &[u8]) -> Result<Vec<u8>, String> {
    if name.len() > MAX_NAME_BYTES || name.iter().any(|b| !b.is_ascii_graphic()) {
        return Err(
            "ERR Client names cannot contain spaces, newlines or special characters.".into(),
        );
    }
    Ok(name.to_vec())
}

/// What `INFO` answers: enough for clients that read it on connect
/// (ioredis waits for `loading:0`). `redis_version` is the Redis release
/// whose commands the port's clients may assume.
fn info() -> String {
    format!(
        "# Server\r\nredis_version:7.2.0\r\nslidegate_version:{}\r\nredis_mode:standalone\r\n\r\n# Persistence\r\nloading:0\r\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// Equal, taking the same time wherever the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
