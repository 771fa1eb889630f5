//! Carrying out the scheduler's actions, in order: engine actions become protocol commands
//! (through the [`EngineLink`](super::engine_link::EngineLink)), stream actions go to the
//! clients (through [`Streams`](super::streams::Streams)). Engine work waits while a step is
//! outstanding; a failed engine command means the engine is lost.

use super::actor::Actor;
use crate::engine::EngineError;
use crate::ids::{RequestId, SeqId};
use crate::protocol::{self, Command};
use crate::scheduler::{Action, ConversationId, Event, ParkPlace, Step};
use std::time::Duration;

impl Actor {
    /// Executes queued actions in order; engine work waits while a step is outstanding.
    pub(super) async fn execute(&mut self) {
        while let Some(action) = self.queue.pop_front() {
            if self.engine.step_outstanding() && needs_engine(&action) {
                self.queue.push_front(action);
                return;
            }
            if !self.engine.is_running() && engine_only(&action) {
                // What it would act on died with the engine process.
                continue;
            }
            match self.execute_one(action).await {
                Ok(()) => {}
                // the engine refused this request's command: it alone fails (R8's drift
                // check, the hardening's per-request error)
                Err(Failed::Request {
                    request,
                    message,
                    lost_tokens,
                }) => {
                    tracing::warn!("{request} failed in the engine: {message}");
                    self.feed(Event::RequestFailed {
                        request,
                        message,
                        lost_tokens,
                    });
                }
                Err(Failed::Engine(error)) => self.engine_lost(error.to_string()),
            }
        }
    }

    /// Whether a queued action still has to talk to the engine.
    pub(super) fn pending_engine_work(&self) -> bool {
        self.queue.iter().any(needs_engine)
    }

    /// One action, dispatched by what it does: the client's stream, the engine's step, a
    /// sequence given or taken back, a request's state moved, a conversation kept or loaded.
    async fn execute_one(&mut self, action: Action) -> Result<(), Failed> {
        match action {
            Action::Deliver { request, .. } => {
                if self.streams.deliver(request) {
                    self.feed(Event::Cancelled(request));
                }
            }
            Action::Finish {
                request,
                reason,
                output_tokens,
                stats,
            } => {
                // the client gets its end whatever the engine does with the close (every
                // token was delivered already); a failed close then counts as the engine's
                let closed = self.engine.close(request).await;
                self.streams.finish(request, reason, output_tokens, &stats);
                closed?;
            }
            Action::Fail { request, error, .. } => {
                let closed = self.engine.close(request).await;
                self.streams.fail(request, &error);
                closed?;
            }
            Action::RestartEngine { delay_secs, .. } => self.restart_engine(delay_secs).await,
            Action::Step(step) => self.send_step(step).await?,
            Action::Assign {
                request,
                seq,
                keep_tokens,
            } => self.assign(request, seq, keep_tokens).await?,
            Action::Release {
                request,
                seq,
                keep_as_conversation,
            } => {
                self.engine.close(request).await?;
                if !keep_as_conversation {
                    self.trim_to_nothing(seq).await?;
                }
            }
            Action::Park { request, to, .. } => self.park(request, to).await?,
            Action::Restore {
                request,
                from,
                into_seq,
            } => self.restore(request, from, into_seq).await?,
            Action::CopyPrefix {
                from,
                to,
                tokens,
                for_request: request,
            } => {
                self.engine
                    .call(Command::CopyPrefix { from, to, tokens })
                    .await
                    .map_err(|e| for_request(e, request, tokens))?;
            }
            Action::DropParked { request, .. } => self.engine.close(request).await?,
            Action::EvictConversation { seq, to_cache } => match to_cache {
                Some(conversation) => self.save_conversation(seq, conversation).await?,
                None => self.trim_to_nothing(seq).await?,
            },
            Action::RestoreConversation {
                conversation,
                into_seq,
                for_request,
            } => {
                self.load_conversation(conversation, into_seq, for_request)
                    .await?;
            }
            Action::DropConversation { conversation } => {
                self.engine.drop_conversation(conversation.0).await?
            }
        }
        Ok(())
    }

    /// The engine stopped and started again after `delay_secs` (the scheduler's backoff).
    async fn restart_engine(&mut self, delay_secs: f64) {
        self.engine.stop().await;
        self.engine
            .start(Duration::from_secs_f64(delay_secs.max(0.0)));
    }

    /// A step: the chunk's tokens taken from the request's prompt, and the requests decoding.
    async fn send_step(&mut self, step: Step) -> Result<(), Failed> {
        // what the engine must hold after the chunk (checked against its reply)
        self.expected_read = step.chunk.as_ref().map(|c| (c.request, c.tokens.end));
        let chunk = step.chunk.map(|c| {
            let prompt = self.streams.get(c.request).map(|l| &l.submission.prompt);
            let tokens = prompt.map_or_else(Vec::new, |p| {
                p[c.tokens.start as usize..c.tokens.end as usize].to_vec()
            });
            protocol::Chunk {
                request: c.request,
                start: c.tokens.start,
                tokens,
                last: c.is_last,
                prompt_tokens: prompt.map_or(0, |p| p.len() as u32),
            }
        });
        let decode: Vec<RequestId> = step.decode.iter().map(|(id, _)| *id).collect();
        self.engine.send_step(chunk, decode).await?;
        Ok(())
    }

    /// A sequence given to a request with its sampling; the engine must keep what was counted.
    async fn assign(
        &mut self,
        request: RequestId,
        seq: SeqId,
        keep_tokens: u32,
    ) -> Result<(), Failed> {
        let sampling = self
            .streams
            .get(request)
            .map(|l| l.submission.sampling.clone())
            .unwrap_or_default();
        let kept = self
            .engine
            .open(request, seq, keep_tokens, sampling)
            .await
            .map_err(|e| for_request(e, request, keep_tokens))?;
        if kept != keep_tokens {
            return Err(Failed::Request {
                request,
                message: format!(
                    "the engine kept {kept} tokens of {seq}, {keep_tokens} were counted"
                ),
                lost_tokens: keep_tokens.saturating_sub(kept),
            });
        }
        Ok(())
    }

    /// A sequence emptied.
    async fn trim_to_nothing(&mut self, seq: SeqId) -> Result<(), Failed> {
        self.engine
            .call(Command::Trim {
                seq,
                keep_tokens: 0,
            })
            .await?;
        Ok(())
    }

    /// A paused stream parked: to host RAM through the engine; in its own sequence in the
    /// pool nothing moves and the engine is not asked.
    async fn park(&mut self, request: RequestId, to: ParkPlace) -> Result<(), Failed> {
        if let ParkPlace::Pool(_) = to {
            return Ok(());
        }
        let reply = self
            .engine
            .call(Command::Park { request })
            .await
            .map_err(|e| for_request(e, request, 0))?;
        log_moved("parked to host RAM", &reply);
        Ok(())
    }

    /// A parked stream back in a sequence: from host RAM through the engine; from its own
    /// sequence in the pool nothing moves.
    async fn restore(
        &mut self,
        request: RequestId,
        from: ParkPlace,
        into_seq: SeqId,
    ) -> Result<(), Failed> {
        if let ParkPlace::Pool(_) = from {
            return Ok(());
        }
        let reply = self
            .engine
            .call(Command::Restore {
                request,
                seq: into_seq,
            })
            .await
            .map_err(|e| for_request(e, request, 0))?;
        log_moved("restored from host RAM", &reply);
        Ok(())
    }

    /// A conversation loaded from the RAM cache into the sequence a request will continue it in.
    async fn load_conversation(
        &mut self,
        conversation: ConversationId,
        into_seq: SeqId,
        request: RequestId,
    ) -> Result<(), Failed> {
        let loaded = self
            .engine
            .load_conversation(conversation.0, into_seq)
            .await
            .map_err(|e| for_request(e, request, 0));
        if loaded.is_err() {
            // the scheduler let the entry go with the load: the engine's copy goes too
            self.engine.drop_conversation(conversation.0).await?;
        }
        loaded
    }

    /// A conversation saved to the RAM cache as its sequence is taken for another request.
    async fn save_conversation(
        &mut self,
        seq: SeqId,
        conversation: ConversationId,
    ) -> Result<(), Failed> {
        // Conversations this batch is about to load must survive the save.
        let keep = self
            .queue
            .iter()
            .filter_map(|a| match a {
                Action::RestoreConversation { conversation, .. } => Some(conversation.0),
                _ => None,
            })
            .collect();
        let evicted = self
            .engine
            .save_conversation(seq, conversation.0, keep)
            .await?;
        if !evicted.is_empty() {
            // The engine's byte bound is tighter than the scheduler's count.
            let evicted = evicted.into_iter().map(ConversationId).collect();
            self.feed(Event::ConversationsEvicted(evicted));
        }
        Ok(())
    }
}

/// Why an action could not be carried out.
pub(super) enum Failed {
    /// The engine is gone, or broke the protocol: everything it held fails (R10).
    Engine(EngineError),
    /// The engine refused one request's command, or holds other tokens than counted.
    Request {
        request: RequestId,
        message: String,
        lost_tokens: u32,
    },
}

impl From<EngineError> for Failed {
    fn from(error: EngineError) -> Self {
        Self::Engine(error)
    }
}

/// An engine refusal of a command made for `request` fails that request alone (it names what
/// was wrong: a grammar, a sequence that holds less than counted); a dead engine stays fatal.
fn for_request(error: EngineError, request: RequestId, lost_tokens: u32) -> Failed {
    match error {
        EngineError::Refused { message, .. } => Failed::Request {
            request,
            message,
            lost_tokens,
        },
        other => Failed::Engine(other),
    }
}

/// Actions that act only on the engine's state (nothing to do without an engine).
fn engine_only(action: &Action) -> bool {
    !matches!(
        action,
        Action::Deliver { .. }
            | Action::RestartEngine { .. }
            | Action::Finish { .. }
            | Action::Fail { .. }
    )
}

/// Actions that may talk to the engine (so wait while a step is outstanding).
fn needs_engine(action: &Action) -> bool {
    !matches!(
        action,
        Action::Deliver { .. } | Action::RestartEngine { .. }
    )
}

/// What a copy between the pool and host RAM cost (parks in the pool copy nothing and log
/// nothing).
fn log_moved(what: &str, reply: &protocol::Reply) {
    if let protocol::Reply::Parked(moved) | protocol::Reply::Restored(moved) = reply {
        tracing::info!(
            "{} {what}: {} tokens, {:.1} MiB in {:.1} ms",
            moved.request.map(|r| r.to_string()).unwrap_or_default(),
            moved.tokens,
            moved.bytes as f64 / (1024.0 * 1024.0),
            moved.micros as f64 / 1000.0,
        );
    }
}
