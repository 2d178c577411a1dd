//! The Redis protocol (RESP2 and RESP3) port, `slidegate serve
//! --resp-addr`: any Redis client can ask for decisions.
//!
//! | command | reply |
//! |---|---|
//! | `CL.THROTTLE key max_burst count_per_period period [quantity]` | redis-cell's `[limited, limit, remaining, retry_after_s, reset_after_s]` ([`throttle`]) |
//! | `SG.ACQUIRE key limit window_ms [COST n] [ALGORITHM a]` | `[allowed 0/1, limit, remaining, retry_after_ms, reset_after_ms]` |
//! | `SG.PEEK key limit window_ms [ALGORITHM a]` | the same, consuming nothing |
//! | `SG.RESET key` | `+OK` once the key is forgotten under every rule; `-NOAUTH` before `AUTH <admin token>` |
//! | `PING`, `ECHO`, `HELLO [2\|3]`, `AUTH`, `CLIENT SETNAME\|SETINFO\|GETNAME\|ID`, `SELECT 0`, `COMMAND`, `INFO`, `QUIT` | as Redis answers them |
//!
//! `SG.*` keys are ad-hoc keys, the key space of `POST /v1/acquire`;
//! `CL.THROTTLE` keys have a space of their own ([`keys`](crate::keys)).
//! Any other command is answered Redis's `-ERR unknown command` and the
//! connection stays open; bytes that are not RESP, or a command beyond
//! the bounds ([`frame`]), are answered `-ERR Protocol error` and close
//! that connection only.

pub mod args;
pub mod commands;
pub mod frame;
pub mod reply;
pub mod session;
pub mod state;
pub mod throttle;

pub use frame::FrameLimits;
pub use session::serve_connection;
pub use state::RespState;
