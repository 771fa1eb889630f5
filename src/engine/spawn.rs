//! Spawning workers from one long-lived thread.
//!
//! On Linux the worker asks the kernel for SIGKILL when its parent dies
//! (`PR_SET_PDEATHSIG`). That signal fires when the *thread* that spawned the child exits, not
//! the process, and tokio's blocking threads exit when idle: so every spawn happens on this
//! thread, which lives as long as the app. The worker also exits when its stdin closes, which
//! covers every platform.

use std::process::{Child, Command};
use std::sync::OnceLock;
use std::sync::mpsc;

struct SpawnRequest {
    command: Command,
    reply: tokio::sync::oneshot::Sender<std::io::Result<Child>>,
}

fn spawner() -> &'static mpsc::Sender<SpawnRequest> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("engine-spawner".into())
            .spawn(move || {
                for mut request in rx {
                    die_with_parent(&mut request.command);
                    let _ = request.reply.send(request.command.spawn());
                }
            })
            .expect("the spawner thread starts");
        tx
    })
}

/// Spawns `command` on the spawner thread.
pub async fn spawn(command: Command) -> std::io::Result<Child> {
    let (reply, answer) = tokio::sync::oneshot::channel();
    spawner()
        .send(SpawnRequest { command, reply })
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    answer
        .await
        .map_err(|_| std::io::Error::other("the spawner thread dropped the request"))?
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and calls only async-signal-safe
    // functions (prctl, getppid, _exit), touching no memory of the parent.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_command: &mut Command) {
    // Elsewhere the worker exits when its stdin closes (the app's end of the pipe closes when
    // the app dies). A Windows job object would also cover a hung worker; not done yet.
}
