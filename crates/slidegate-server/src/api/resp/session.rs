//! One RESP connection: read what the client sent, run every whole
//! command in it, send the replies in one write, and read again.
//!
//! A pipeline (many commands in one read) is answered in order, in one
//! write. A protocol error is answered `-ERR Protocol error: ...`, and
//! then only this connection closes. The socket's deadlines are its own
//! (the caller's); `busy` marks the time from a command's arrival to its
//! reply's write (a partial command is not busy: it counts against the
//! partial-command deadline).

use std::future::Future;

use slidegate::Store;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::commands::{Flow, Session};
use super::frame;
use super::reply::Replies;
use super::state::RespState;

/// How much room a read gets at least.
const READ_CHUNK: usize = 16 * 1024;

/// Serves the connection `io` until the client closes it, sends `QUIT`, a
/// protocol error, or `stop` completes while no command is in flight.
/// `busy` is called when commands arrive; what it returns is dropped once
/// their replies are written; `begun` is called after that when part of
/// the next command is already buffered (its deadline starts).
pub async fn serve_connection<S, IO, G>(
    mut io: IO,
    state: RespState<S>,
    busy: impl Fn() -> G,
    begun: impl Fn(),
    stop: impl Future<Output = ()>,
) where
    S: Store,
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let limits = state.frame;
    let mut session = Session::new(state);
    let mut replies = Replies::default();
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    let mut stop = std::pin::pin!(stop);
    loop {
        let mut start = 0;
        let mut guard = None;
        let mut flow = Flow::Continue;
        while flow == Flow::Continue {
            match frame::parse(&buf[start..], limits) {
                Ok(Some(command)) => {
                    let args: Vec<&[u8]> = command
                        .args
                        .iter()
                        .map(|range| &buf[start + range.start..start + range.end])
                        .collect();
                    start += command.len;
                    if args.is_empty() {
                        continue;
                    }
                    if guard.is_none() {
                        guard = Some(busy());
                    }
                    flow = session.execute(&args, &mut replies).await;
                }
                Ok(None) => break,
                Err(error) => {
                    tracing::debug!(%error, "RESP protocol error: closing the connection");
                    replies.error(&format!("ERR Protocol error: {error}"));
                    flow = Flow::Close;
                }
            }
        }
        buf.drain(..start);
        if !replies.is_empty() {
            if io.write_all(replies.bytes()).await.is_err() {
                return;
            }
            replies.clear();
        }
        if guard.take().is_some() && !buf.is_empty() {
            begun();
        }
        if flow == Flow::Close {
            let _ = io.shutdown().await;
            return;
        }
        buf.reserve(READ_CHUNK);
        tokio::select! {
            biased;
            () = &mut stop => return,
            read = io.read_buf(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
        }
    }
}
