//! Spawning workers from one long-lived thread.
//!
//! On Linux the worker asks the kernel for SIGKILL when its parent dies
//! (`PR_SET_PDEATHSIG`). That signal fires when the *thread* that spawned the child exits, not
//! the process, and tokio's blocking threads exit when idle: so every spawn happens on this
//! thread, which lives as long as the app. On Windows every worker is put in one job object
//! with kill-on-close: the app holds the job's only handle, and when the app ends, however it
//! ends (a crash, Task Manager, logoff), Windows closes the handle and kills the workers. The
//! worker also exits when its stdin closes, which covers every platform.

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
                    let child = request.command.spawn();
                    if let Ok(child) = &child {
                        adopt(child);
                    }
                    let _ = request.reply.send(child);
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
    // the app dies); on Windows the job object (`adopt`) kills it even if it does not.
}

#[cfg(not(windows))]
fn adopt(_child: &Child) {}

/// Puts a just-spawned worker in the app's kill-on-close job. A worker the job cannot take is
/// still served (it exits on stdin EOF), with a warning. The worker runs a few instructions
/// before it is assigned; it starts no process of its own, so nothing escapes the job.
#[cfg(windows)]
fn adopt(child: &Child) {
    if let Err(e) = job::assign(child) {
        tracing::warn!(
            "the engine worker is not in a kill-on-close job ({e}); it may outlive a crash of \
             the app"
        );
    }
}

/// The Windows job object: the one place with Win32 calls for it.
#[cfg(windows)]
#[allow(unsafe_code)]
mod job {
    use std::os::windows::io::AsRawHandle;
    use std::process::Child;
    use std::sync::OnceLock;
    use windows_sys::Win32::Foundation::CloseHandle;
    use windows_sys::Win32::System::JobObjects::{
        AssignProcessToJobObject, CreateJobObjectW, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
        JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JobObjectExtendedLimitInformation,
        SetInformationJobObject,
    };

    /// The job's handle as an integer (a raw handle is not `Send`). Never closed by the app:
    /// Windows closes it when the process ends, which is what kills the workers. Not
    /// inheritable (no security attributes), so no worker holds its own job open.
    struct Job(isize);

    fn job() -> Result<&'static Job, String> {
        static JOB: OnceLock<Result<Job, String>> = OnceLock::new();
        JOB.get_or_init(create).as_ref().map_err(Clone::clone)
    }

    fn create() -> Result<Job, String> {
        // SAFETY: plain Win32 calls with valid arguments: no security attributes and no name
        // (null pointers are allowed), and a fully initialised, correctly sized limit struct.
        unsafe {
            let handle = CreateJobObjectW(std::ptr::null(), std::ptr::null());
            if handle.is_null() {
                return Err(format!(
                    "CreateJobObjectW: {}",
                    std::io::Error::last_os_error()
                ));
            }
            let mut limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = std::mem::zeroed();
            limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
            let set = SetInformationJobObject(
                handle,
                JobObjectExtendedLimitInformation,
                (&raw const limits).cast(),
                std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            );
            if set == 0 {
                let error = std::io::Error::last_os_error();
                CloseHandle(handle);
                return Err(format!("SetInformationJobObject: {error}"));
            }
            Ok(Job(handle as isize))
        }
    }

    pub fn assign(child: &Child) -> Result<(), String> {
        let job = job()?;
        // SAFETY: both handles are live: the job's for the app's lifetime, the child's while
        // `child` is borrowed.
        let assigned = unsafe { AssignProcessToJobObject(job.0 as _, child.as_raw_handle() as _) };
        if assigned == 0 {
            return Err(format!(
                "AssignProcessToJobObject: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }
}
