//! Running one step on the model of the engine: the chunk read, each decode's token.

use super::*;

impl Sim {
    pub(super) fn token_for(id: RequestId, index: usize) -> TokenId {
        50_000 + ((id.0 as usize * 131 + index * 7) % 10_000) as TokenId
    }

    /// The fake engine runs a step: checks continuity, appends to caches, samples.
    pub(super) fn execute_step(&mut self, step: &Step) -> Vec<StepOutput> {
        let mut outs = Vec::new();
        if let Some(c) = &step.chunk {
            let p = &self.prompts[&c.request];
            assert_eq!(
                self.seq_owner.get(&c.seq),
                Some(&c.request),
                "chunk into a seq it does not hold"
            );
            let content = self.seqs.entry(c.seq).or_default();
            assert_eq!(
                content.len(),
                c.tokens.start as usize,
                "{}: chunk does not continue the cache",
                c.request
            );
            assert_eq!(&content[..], &p[..content.len()]);
            content.extend_from_slice(&p[c.tokens.start as usize..c.tokens.end as usize]);
            let marks = self
                .read_marks
                .entry(c.request)
                .or_insert_with(|| vec![false; p.len()]);
            for m in &mut marks[c.tokens.start as usize..c.tokens.end as usize] {
                if *m {
                    self.prefix_losses += 1;
                }
                *m = true;
            }
            if c.is_last {
                assert_eq!(c.tokens.end as usize, p.len());
                outs.push(self.sample(c.request));
            }
        }
        for (id, seq) in &step.decode {
            assert_eq!(
                self.seq_owner.get(seq),
                Some(id),
                "decode of a seq it does not hold"
            );
            let p_len = self.prompts[id].len();
            let sampled = self.sampled.get(id).cloned().unwrap_or_default();
            let content = self.seqs.entry(*seq).or_default();
            assert_eq!(
                content.len(),
                p_len + sampled.len() - 1,
                "{id}: decode cache length"
            );
            content.push(*sampled.last().unwrap());
            outs.push(self.sample(*id));
        }
        outs
    }

    pub(super) fn sample(&mut self, id: RequestId) -> StepOutput {
        let v = self.sampled.entry(id).or_default();
        let t = Self::token_for(id, v.len());
        v.push(t);
        let finished = (v.len() as u32 >= self.gen_len[&id]).then_some(FinishReason::Stop);
        StepOutput {
            request: id,
            token: Some(t),
            finished,
        }
    }
}
