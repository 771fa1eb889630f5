//! Two processes of the app under Xvfb, over a private session bus with a tray host (a fake
//! StatusNotifierWatcher): the tray's Show/Hide hides the window in one click, a second start
//! brings it back (shown: its X window mapped again) and ends, the tray's next click hides it
//! in one click again, and SIGTERM ends the app although closing would only hide it.
//! Skipped (said) without Xvfb, dbus-daemon or xwininfo.

use crate::support::worker_exe;
use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `program` and reads the first line it prints (Xvfb's display, the bus's address).
fn first_line(program: &str, args: &[&str]) -> Option<(Killed, String)> {
    let mut child = match Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            eprintln!("SKIPPED: no {program} ({e})");
            return None;
        }
    };
    let mut line = String::new();
    let stdout = child.stdout.take().unwrap();
    std::io::BufReader::new(stdout).read_line(&mut line).ok()?;
    Some((Killed(child), line.trim().to_owned()))
}

/// A tray host, as KDE's (or GNOME's AppIndicator extension) serves it.
struct Watcher;

#[zbus::interface(name = "org.kde.StatusNotifierWatcher")]
impl Watcher {
    #[zbus(property)]
    fn is_status_notifier_host_registered(&self) -> bool {
        true
    }

    fn register_status_notifier_item(&self, _service: &str) {}
}

/// The window's X map state, as `xwininfo` says it (`IsViewable`, `IsUnMapped`).
fn map_state(display: &str) -> Option<String> {
    let out = Command::new("xwininfo")
        .args(["-display", display, "-name", "Strata Desk"])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Map State: "))
        .map(str::to_owned)
}

fn until(what: &str, secs: u64, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < Duration::from_secs(secs),
            "not within {secs} s: {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Clicks the tray menu's Show/Hide (dbusmenu id 1) as a tray host does.
fn click_show_hide(bus: &zbus::blocking::Connection, item: &str) {
    let data = zbus::zvariant::Value::from(0i32);
    bus.call_method(
        Some(item),
        "/MenuBar",
        Some("com.canonical.dbusmenu"),
        "Event",
        &(1i32, "clicked", data, 0u32),
    )
    .unwrap();
}

#[test]
fn a_second_start_brings_the_hidden_window_to_the_front_and_the_tray_toggles_in_one_click() {
    // Not beside a test that runs an engine: its 20-s bounds on a window drawn in software
    // under Xvfb ran out once on two cores while the seeds' scenarios loaded a llama-server.
    let _serial = crate::support::real_model();
    let Some((_xvfb, display)) =
        first_line("Xvfb", &["-displayfd", "1", "-screen", "0", "1280x800x24"])
    else {
        return;
    };
    let display = format!(":{display}");
    let Some((_bus, address)) = first_line(
        "dbus-daemon",
        &["--session", "--nofork", "--print-address=1"],
    ) else {
        return;
    };
    if Command::new("xwininfo").arg("-version").output().is_err() {
        eprintln!("SKIPPED: no xwininfo");
        return;
    }
    let _watcher = zbus::blocking::connection::Builder::address(address.as_str())
        .unwrap()
        .name("org.kde.StatusNotifierWatcher")
        .unwrap()
        .serve_at("/StatusNotifierWatcher", Watcher)
        .unwrap()
        .build()
        .unwrap();
    let bus = zbus::blocking::connection::Builder::address(address.as_str())
        .unwrap()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(&config, "{}").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let app = |extra: &[&str]| {
        let mut command = Command::new(worker_exe());
        command
            .args(["--engine", "sim", "--port", &port.to_string(), "--config"])
            .arg(&config)
            .args(extra)
            .env("DISPLAY", &display)
            .env_remove("WAYLAND_DISPLAY")
            .env("DBUS_SESSION_BUS_ADDRESS", &address)
            .env("XDG_DATA_HOME", dir.path().join("data"))
            .env("LIBGL_ALWAYS_SOFTWARE", "1");
        command
    };
    let mut first = Killed(app(&[]).stderr(Stdio::null()).spawn().unwrap());
    until("the first window shows", 90, || {
        map_state(&display).as_deref() == Some("IsViewable")
    });
    let mut item = String::new();
    until("the tray icon registers", 30, || {
        let names = bus
            .call_method(
                Some("org.freedesktop.DBus"),
                "/org/freedesktop/DBus",
                Some("org.freedesktop.DBus"),
                "ListNames",
                &(),
            )
            .and_then(|r| r.body().deserialize::<Vec<String>>())
            .unwrap_or_default();
        let found = names
            .into_iter()
            .find(|n| n.starts_with("org.kde.StatusNotifierItem"));
        found.map(|n| item = n).is_some()
    });

    click_show_hide(&bus, &item);
    until("one click of Show/Hide hides the window", 20, || {
        map_state(&display).as_deref() == Some("IsUnMapped")
    });

    let second = app(&[]).output().unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(0), "{said}");
    assert!(
        said.contains("its window was brought to the front"),
        "{said}"
    );
    until("the second start shows the window", 20, || {
        map_state(&display).as_deref() == Some("IsViewable")
    });

    // the tray knows the window is shown again: one click hides it
    click_show_hide(&bus, &item);
    until("one click of Show/Hide hides it again", 20, || {
        map_state(&display).as_deref() == Some("IsUnMapped")
    });

    // SIGTERM ends the app (a close would only hide it to the tray)
    let term = Command::new("kill")
        .args(["-TERM", &first.0.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    until("SIGTERM ends the app", 30, || {
        first.0.try_wait().unwrap().is_some()
    });
}
