//! How to start a worker: which executable, with which options.

use crate::protocol::{FlashAttn, KvType, WorkerOptions};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct WorkerLaunch {
    /// This app's own binary (`std::env::current_exe()`; in tests the built binary).
    pub exe: PathBuf,
    pub options: WorkerOptions,
    /// Loading a model can take long on a slow disk; past this the start fails.
    pub handshake_timeout: Duration,
}

impl WorkerLaunch {
    pub fn new(exe: PathBuf, options: WorkerOptions) -> Self {
        Self {
            exe,
            options,
            handshake_timeout: Duration::from_secs(120),
        }
    }

    /// The worker's arguments for the first engine generation.
    pub fn args(&self) -> Vec<OsString> {
        self.args_for(1)
    }

    /// The worker's arguments for engine generation `generation` (the simulated engine is
    /// told which it is: its message-counted faults fire in the first only).
    pub fn args_for(&self, generation: u64) -> Vec<OsString> {
        let o = &self.options;
        let mut args: Vec<OsString> = vec!["engine-worker".into()];
        if let Some(model) = &o.model {
            args.push("--model".into());
            args.push(model.clone().into_os_string());
        }
        args.push("--conversation-cache-mib".into());
        args.push(o.conversation_cache_mib.to_string().into());
        for (flag, value) in [
            ("--ctx", o.ctx_tokens),
            ("--slots", o.slots),
            ("--kv-sequences", o.kv_sequences),
            ("--threads", o.threads),
            ("--n-batch", o.n_batch),
        ] {
            args.push(flag.into());
            args.push(value.to_string().into());
        }
        args.push("--gpu-layers".into());
        args.push(o.gpu_layers.to_string().into());
        args.push("--flash-attn".into());
        args.push(
            match o.flash_attn {
                FlashAttn::Auto => "auto",
                FlashAttn::On => "on",
                FlashAttn::Off => "off",
            }
            .into(),
        );
        args.push("--kv-type".into());
        args.push(
            match o.kv_type {
                KvType::F16 => "f16",
                KvType::Q8_0 => "q8_0",
            }
            .into(),
        );
        let fake = &o.fake;
        if fake.enabled {
            args.push("--fake".into());
            for (flag, value) in [
                ("--fake-kv-cells", fake.kv_cells.to_string()),
                ("--fake-prompt-tps", fake.prompt_tokens_per_sec.to_string()),
                ("--fake-decode-tps", fake.decode_steps_per_sec.to_string()),
                ("--fake-load-secs", fake.load_secs.to_string()),
            ] {
                args.push(flag.into());
                args.push(value.into());
            }
            if fake.non_trimmable {
                args.push("--fake-non-trimmable".into());
            }
            if let Some(script) = &fake.script {
                args.push("--fake-script".into());
                args.push(script.clone().into_os_string());
            }
            for fault in &fake.faults {
                args.push("--fake-fault".into());
                args.push(fault.into());
            }
            args.push("--fake-generation".into());
            args.push(generation.to_string().into());
        }
        args
    }
}
