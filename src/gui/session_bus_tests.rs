//! The session-bus checks against a private bus (`dbus-daemon`), with a fake tray watcher
//! and a fake portal on it or not.

use super::linux::{at, portal_on, tray_host_on};
use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};

/// A private session bus, ended when dropped; `None` (said) where dbus-daemon is missing.
struct PrivateBus {
    daemon: Child,
    address: String,
}

impl PrivateBus {
    fn start() -> Option<Self> {
        let mut daemon = match Command::new("dbus-daemon")
            .args(["--session", "--nofork", "--print-address=1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(daemon) => daemon,
            Err(e) => {
                eprintln!("SKIPPED: no dbus-daemon ({e})");
                return None;
            }
        };
        let mut line = String::new();
        let stdout = daemon.stdout.take().unwrap();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        Some(Self {
            daemon,
            address: line.trim().to_owned(),
        })
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

/// A StatusNotifierWatcher as KDE's (or GNOME's AppIndicator extension) serves it.
struct FakeWatcher {
    host: bool,
}

#[zbus::interface(name = "org.kde.StatusNotifierWatcher")]
impl FakeWatcher {
    #[zbus(property)]
    fn is_status_notifier_host_registered(&self) -> bool {
        self.host
    }
}

fn watcher(bus: &PrivateBus, host: bool) -> zbus::blocking::Connection {
    zbus::blocking::connection::Builder::address(bus.address.as_str())
        .unwrap()
        .name("org.kde.StatusNotifierWatcher")
        .unwrap()
        .serve_at("/StatusNotifierWatcher", FakeWatcher { host })
        .unwrap()
        .build()
        .unwrap()
}

#[test]
fn a_tray_host_is_seen_only_where_a_watcher_says_a_host_is_registered() {
    let Some(bus) = PrivateBus::start() else {
        return;
    };
    let us = at(&bus.address).unwrap();
    assert!(!tray_host_on(&us), "no watcher on the bus, yet a tray host");
    let served = watcher(&bus, false);
    assert!(
        !tray_host_on(&us),
        "a watcher with no host, yet a tray host"
    );
    // a host registers (the extension is turned on)
    served
        .object_server()
        .interface::<_, FakeWatcher>("/StatusNotifierWatcher")
        .unwrap()
        .get_mut()
        .host = true;
    assert!(tray_host_on(&us), "a watcher with a host, and no tray host");
}

#[test]
fn a_file_dialog_is_seen_only_where_the_portal_is_on_the_bus() {
    let Some(bus) = PrivateBus::start() else {
        return;
    };
    let us = at(&bus.address).unwrap();
    assert!(!portal_on(&us), "no portal on the bus, yet a file dialog");
    let _portal = zbus::blocking::connection::Builder::address(bus.address.as_str())
        .unwrap()
        .name("org.freedesktop.portal.Desktop")
        .unwrap()
        .build()
        .unwrap();
    assert!(
        portal_on(&us),
        "the portal is on the bus, and no file dialog"
    );
}
