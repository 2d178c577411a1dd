//! Coalescing: the decisions that reach a Redis node while calls to it are
//! out wait in that node's queue, and go together as one script call that
//! decides them one after the other (`batch.lua`), each exactly as a call
//! of its own would.
//!
//! - **No timer.** Each node (a single Redis, or one master of a cluster)
//!   has a [`Lane`]: a queue and up to [`Coalesce::max_in_flight`] calls
//!   out at once. A decision that finds fewer calls out sends at once,
//!   itself, with whatever was waiting: a lone request pays no extra wait
//!   and no extra task. Otherwise it waits, and the next call to finish
//!   takes it with the others that queued meanwhile (up to
//!   [`Coalesce::max_decisions`] and [`Coalesce::max_bytes`]) and sends
//!   them as one call, while the other calls in flight keep Redis busy.
//! - **One call, one `TIME`.** Every decision of a call is decided at the
//!   same microsecond, Redis' (or the sender's clock with a client clock).
//!   A call of one decision is the plain call, as without coalescing.
//! - **Per decision, as before.** Each caller waits for its own answer
//!   within the store's deadline, and takes its own circuit breaker permit
//!   (see `resilient/gate.rs`), so a call that fails or times out is the
//!   failure of each of its decisions, each decided by the failure policy;
//!   errors that belong to one decision (a key conflict) are that
//!   decision's only.
//! - **Nothing left behind.** A decision whose caller left before its call
//!   was sent is dropped from the queue, never sent. A call, once built,
//!   always runs to its end and answers everyone in it: the caller that
//!   sends a call and leaves before the answer (a dropped future) hands the
//!   call to a task of its own, which also sends the calls queued after
//!   it. Nothing is ever waited on without a deadline, so the queue drains.
//! - **A cluster master** takes the decisions of all the slots it serves: a
//!   script's keys must share a slot, so the decisions of one slot share a
//!   call, and the calls of one turn go out in one write (a pipeline).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use parking_lot::Mutex;
use redis::aio::ConnectionManager;
use tokio::sync::oneshot;

use super::calls::Calls;
use super::errors::{
    NOSCRIPT_RETRIES, describe, is_noscript_reply, is_redirect_reply, store_error,
};
use super::script::{Part, coalesced_call, load_command, plain_call};
use crate::error::Error;

/// What a decision's caller gets back.
#[derive(Debug)]
pub(crate) enum Answer {
    /// The script's answer for this decision.
    Reply(redis::Value),
    /// The error the script answered for this decision (a key conflict,
    /// a cancelled cross-slot step...), and where its keys started.
    Refused(redis::RedisError, usize),
    /// The node does not serve the decision's slot (`MOVED`, `ASK`): send
    /// it through the cluster connection, which follows the slot.
    Moved,
    /// The call failed as a whole (connection, timeout, Redis error).
    Failed(Error),
}

/// One node's connection and its queue of waiting decisions.
pub(crate) struct Lane {
    connection: ConnectionManager,
    calls: Arc<Calls>,
    /// A cluster master: group a call's decisions by slot.
    by_slot: bool,
    queue: Mutex<Queue>,
}

struct Queue {
    waiting: VecDeque<Waiting>,
    /// Calls being sent or in flight (each by one sender).
    senders: usize,
}

struct Waiting {
    part: Part,
    answer: oneshot::Sender<Answer>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let queue = self.queue.lock();
        f.debug_struct("Lane")
            .field("waiting", &queue.waiting.len())
            .field("senders", &queue.senders)
            .finish_non_exhaustive()
    }
}

impl Lane {
    pub(crate) fn new(connection: ConnectionManager, calls: Arc<Calls>, by_slot: bool) -> Lane {
        Lane {
            connection,
            calls,
            by_slot,
            queue: Mutex::new(Queue {
                waiting: VecDeque::new(),
                senders: 0,
            }),
        }
    }

    /// The node's connection, for commands other than decisions.
    pub(crate) fn connection(&self) -> ConnectionManager {
        self.connection.clone()
    }

    /// Decisions waiting for a call (for tests and diagnostics).
    pub(crate) fn waiting(&self) -> usize {
        self.queue.lock().waiting.len()
    }

    /// Calls being sent or in flight (for tests and diagnostics).
    pub(crate) fn senders(&self) -> usize {
        self.queue.lock().senders
    }

    /// Decides `part`, within the deadline: alone, or coalesced with the
    /// decisions waiting for this node.
    pub(crate) async fn decide(self: &Arc<Self>, part: Part) -> Answer {
        let timeout = self.calls.timeout;
        if !self.calls.coalesce.is_on() {
            // Boxed: the connection's futures are large, and a decision's
            // future is moved whole by every layer around it.
            return match tokio::time::timeout(timeout, Box::pin(self.call_one(part))).await {
                Ok(answer) => answer,
                Err(_) => Answer::Failed(Error::Timeout(timeout)),
            };
        }
        let (answer, reply) = oneshot::channel();
        let batch = {
            let mut queue = self.queue.lock();
            queue.waiting.push_back(Waiting { part, answer });
            if queue.senders < self.calls.coalesce.max_in_flight {
                queue.senders += 1;
                Some(self.take(&mut queue))
            } else {
                None
            }
        };
        // This caller sends the call that holds its decision (and whatever
        // was waiting); if it leaves first, the call goes on in a task.
        let mut sending = Sending(batch.map(|batch| Arc::clone(self).send(batch, true)));
        let wait = async {
            if let Some(call) = sending.0.as_mut() {
                call.await;
                sending.0 = None;
            }
            reply.await
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Answer::Failed(Error::Store(
                "the call deciding this was dropped (the runtime is shutting down)".into(),
            )),
            Err(_) => Answer::Failed(Error::Timeout(timeout)),
        }
    }

    /// The next call's decisions, oldest first: those whose caller is
    /// still waiting (the others are dropped, never sent), within the
    /// bounds, at least one when any is waiting.
    fn take(&self, queue: &mut Queue) -> Vec<Waiting> {
        let coalesce = &self.calls.coalesce;
        let mut batch = Vec::new();
        let mut bytes = 0;
        while let Some(next) = queue.waiting.front() {
            if next.answer.is_closed() {
                queue.waiting.pop_front();
                continue;
            }
            if !batch.is_empty()
                && (batch.len() >= coalesce.max_decisions
                    || bytes + next.part.len() > coalesce.max_bytes)
            {
                break;
            }
            bytes += next.part.len();
            match queue.waiting.pop_front() {
                Some(next) => batch.push(next),
                None => break,
            }
        }
        batch
    }

    /// Sends `batch`, then the calls queued meanwhile, until none waits.
    /// A caller that sent the first call itself (`own`) hands the next one
    /// to a task: it has its answer and goes on.
    fn send(self: Arc<Self>, mut batch: Vec<Waiting>, own: bool) -> Call {
        Box::pin(async move {
            let mut turn = Turn {
                lane: Arc::clone(&self),
                held: true,
            };
            loop {
                self.call(batch).await;
                let next = {
                    let mut queue = self.queue.lock();
                    let next = self.take(&mut queue);
                    if next.is_empty() {
                        queue.senders -= 1;
                        turn.held = false;
                    }
                    next
                };
                if next.is_empty() {
                    return;
                }
                if own && let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    turn.held = false;
                    runtime.spawn(Arc::clone(&self).send(next, false));
                    return;
                }
                batch = next;
            }
        })
    }

    /// One call: the decisions of `batch` (grouped by slot on a cluster
    /// master, one script call per slot, all in one write), then each
    /// decision's answer to its caller.
    async fn call(&self, mut batch: Vec<Waiting>) {
        let calls = &*self.calls;
        let now = calls.clock.as_ref().map(|c| c.now_micros());
        if self.by_slot {
            // Stable: decisions of one slot keep their order.
            batch.sort_by_key(|w| w.part.slot);
        }
        let mut groups: Vec<(usize, usize)> = Vec::new();
        for (i, waiting) in batch.iter().enumerate() {
            match groups.last_mut() {
                Some((start, len))
                    if !self.by_slot || batch[*start].part.slot == waiting.part.slot =>
                {
                    *len += 1;
                }
                _ => groups.push((i, 1)),
            }
        }
        let commands: Vec<redis::Cmd> = groups
            .iter()
            .map(|&(start, len)| match &batch[start..start + len] {
                [one] => plain_call(&one.part, now, calls.margin_ms),
                several => coalesced_call(several.iter().map(|w| &w.part), now, calls.margin_ms),
            })
            .collect();
        let replies = match tokio::time::timeout(calls.timeout, self.invoke(commands)).await {
            Ok(Ok(replies)) if replies.len() == groups.len() => replies,
            Ok(Ok(replies)) => {
                let error = Error::Store(format!(
                    "{} replies to a pipeline of {} calls",
                    replies.len(),
                    groups.len()
                ));
                return fail_all(batch, &error);
            }
            Ok(Err(e)) => return fail_all(batch, &store_error(&e, calls.timeout)),
            Err(_) => return fail_all(batch, &Error::Timeout(calls.timeout)),
        };
        let mut batch = batch.into_iter();
        for (&(_, len), reply) in groups.iter().zip(replies) {
            answer_group(batch.by_ref().take(len), len, reply);
        }
    }

    /// A call of one decision, by its caller (coalescing off).
    async fn call_one(&self, part: Part) -> Answer {
        let now = self.calls.clock.as_ref().map(|c| c.now_micros());
        let command = plain_call(&part, now, self.calls.margin_ms);
        match self.invoke(vec![command]).await {
            Ok(mut replies) => match replies.pop() {
                Some(reply) if is_redirect_reply(&reply) => Answer::Moved,
                Some(reply) => answer(reply, 0),
                None => Answer::Failed(Error::Store("no reply to a script call".into())),
            },
            Err(e) => Answer::Failed(store_error(&e, self.calls.timeout)),
        }
    }

    /// Sends `commands` in one write and reads their replies. A call the
    /// script cache lost (`NOSCRIPT`, after a restart, a failover or a
    /// `SCRIPT FLUSH`) did not run: the script is loaded and that call
    /// sent again, up to a few times. Nothing else is ever sent twice.
    async fn invoke(&self, commands: Vec<redis::Cmd>) -> redis::RedisResult<Vec<redis::Value>> {
        let mut connection = self.connection.clone();
        let mut replies = send(&mut connection, &commands).await?;
        for _ in 0..NOSCRIPT_RETRIES {
            let lost: Vec<usize> = (0..replies.len())
                .filter(|&i| is_noscript_reply(&replies[i]))
                .collect();
            if lost.is_empty() {
                break;
            }
            if let redis::Value::ServerError(e) =
                connection.send_packed_command(&load_command()).await?
            {
                return Err(e.into());
            }
            let again: Vec<redis::Cmd> = lost.iter().map(|&i| commands[i].clone()).collect();
            for (i, reply) in lost.into_iter().zip(send(&mut connection, &again).await?) {
                replies[i] = reply;
            }
        }
        Ok(replies)
    }
}

/// Sends `commands`: one alone, several as a pipeline (one write).
async fn send(
    connection: &mut ConnectionManager,
    commands: &[redis::Cmd],
) -> redis::RedisResult<Vec<redis::Value>> {
    match commands {
        [one] => Ok(vec![connection.send_packed_command(one).await?]),
        several => {
            let mut pipeline = redis::Pipeline::with_capacity(several.len());
            for command in several {
                pipeline.add_command(command.clone());
            }
            connection
                .send_packed_commands(&pipeline, 0, several.len())
                .await
        }
    }
}

/// Answers the `len` decisions of one script call with its reply: a
/// coalesced call answers each with its own element.
fn answer_group(group: impl Iterator<Item = Waiting>, len: usize, reply: redis::Value) {
    if is_redirect_reply(&reply) {
        for waiting in group {
            let _ = waiting.answer.send(Answer::Moved);
        }
        return;
    }
    let mut group = group;
    if len == 1 {
        if let Some(waiting) = group.next() {
            let _ = waiting.answer.send(answer(reply, 0));
        }
        return;
    }
    match reply {
        redis::Value::Array(elements) if elements.len() == len => {
            let mut base = 0;
            for (waiting, element) in group.zip(elements) {
                let nkeys = waiting.part.nkeys();
                let _ = waiting.answer.send(answer(element, base));
                base += nkeys;
            }
        }
        redis::Value::ServerError(e) => {
            let error = Error::Store(describe(&redis::RedisError::from(e)));
            for waiting in group {
                let _ = waiting.answer.send(Answer::Failed(error.clone()));
            }
        }
        other => {
            let error = Error::Store(format!(
                "a coalesced call of {len} decisions answered {other:?}"
            ));
            for waiting in group {
                let _ = waiting.answer.send(Answer::Failed(error.clone()));
            }
        }
    }
}

/// The answer for a decision whose keys start at `base` in its call.
fn answer(reply: redis::Value, base: usize) -> Answer {
    match reply {
        redis::Value::ServerError(e) => Answer::Refused(e.into(), base),
        reply => Answer::Reply(reply),
    }
}

fn fail_all(batch: Vec<Waiting>, error: &Error) {
    for waiting in batch {
        let _ = waiting.answer.send(Answer::Failed(error.clone()));
    }
}

/// A sender's calls, from the first to the last of its turn.
type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The call a caller is sending: handed to a task if the caller leaves
/// before it is done, so that everyone in it gets an answer.
struct Sending(Option<Call>);

impl Drop for Sending {
    fn drop(&mut self) {
        if let Some(call) = self.0.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(call);
                }
                // Dropped outside a runtime: the call is dropped with it,
                // its decisions answered "dropped" and its turn given back.
                Err(_) => drop(call),
            }
        }
    }
}

/// A sender's turn on its lane, given back if the sender is dropped before
/// it gives it back itself (a runtime shutting down).
struct Turn {
    lane: Arc<Lane>,
    held: bool,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.held {
            self.lane.queue.lock().senders -= 1;
        }
    }
}
