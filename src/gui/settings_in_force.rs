//! What the running engine actually uses, beside the settings view's draft (issue #62 item 8):
//! a setting left to the engine (`chunk_tokens` measured, `gpu_layers` auto) shows the value
//! in force and where it came from, never a greyed placeholder; a `ctx_min` above the model's
//! trained context says it counts as that context.

use crate::service::ServiceSnapshot;

/// The running engine's values the settings view shows, copied from the snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InForce {
    /// The prompt read chunk in force (0 before the first engine).
    pub chunk_tokens: u32,
    /// Layers on the GPU, of the model's, and how that was chosen (`None` before the first
    /// engine).
    pub gpu_layers: Option<(u32, u32, String)>,
    /// The model's trained context (0: not known).
    pub trained_ctx: u32,
    /// Preemption (`solo_priority`) is on: `parallel` 2 or more is refused with it.
    pub solo_priority: bool,
}

impl InForce {
    pub fn of(s: &ServiceSnapshot) -> Self {
        Self {
            chunk_tokens: s.chunk_tokens,
            gpu_layers: s
                .engine
                .device
                .as_ref()
                .map(|d| (d.gpu_layers, d.model_layers, d.chosen_by.clone())),
            trained_ctx: s.engine.trained_context_tokens,
            solo_priority: s.solo_priority,
        }
    }

    /// `chunk_tokens` measured: what the engine measured, in words.
    pub fn chunk_words(&self) -> String {
        match self.chunk_tokens {
            0 => "measured when the engine starts".to_owned(),
            n => format!("{n} in force (measured)"),
        }
    }

    /// `gpu_layers` auto: what the fitting chose, in words.
    pub fn gpu_layers_words(&self) -> String {
        match &self.gpu_layers {
            None => "chosen when the engine starts".to_owned(),
            Some((_, _, by)) if by == "auto-no-gpu" => "0 in force: no GPU found".to_owned(),
            Some((n, of, by)) if by == "auto-fit-failed" => {
                format!("{n} of {of} layers in force: the fitting failed, the log says why")
            }
            Some((n, of, _)) => format!("{n} of {of} layers on the GPU in force"),
        }
    }

    /// A `ctx_min` above the model's trained context (with `ctx` 0): what it counts as.
    pub fn ctx_min_note(&self, ctx: u32, ctx_min: u32) -> Option<String> {
        (ctx == 0 && self.trained_ctx > 0 && ctx_min > self.trained_ctx).then(|| {
            format!(
                "ctx_min {ctx_min} is above this model's trained context ({}): it counts as {}",
                self.trained_ctx, self.trained_ctx
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_left_to_the_engine_are_shown_as_in_force_with_where_they_came_from() {
        let mut f = InForce {
            chunk_tokens: 64,
            gpu_layers: Some((0, 30, "auto-no-gpu".into())),
            trained_ctx: 8192,
            solo_priority: true,
        };
        assert_eq!(f.chunk_words(), "64 in force (measured)");
        assert_eq!(f.gpu_layers_words(), "0 in force: no GPU found");
        f.gpu_layers = Some((24, 30, "auto".into()));
        assert_eq!(f.gpu_layers_words(), "24 of 30 layers on the GPU in force");
        assert_eq!(
            f.ctx_min_note(0, 32768).as_deref(),
            Some("ctx_min 32768 is above this model's trained context (8192): it counts as 8192")
        );
        assert_eq!(f.ctx_min_note(4096, 32768), None);
        assert_eq!(f.ctx_min_note(0, 8192), None);
    }
}
