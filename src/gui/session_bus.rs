//! What the desktop offers, asked on the D-Bus session bus (Linux; elsewhere both are there):
//! whether a tray host shows the tray icon (the icon registers on the bus even where nothing
//! shows it, as on GNOME without the AppIndicator extension), and whether a file dialog can
//! open (rfd asks xdg-desktop-portal, then zenity).

/// Whether a tray host shows StatusNotifierItems now: `org.kde.StatusNotifierWatcher` is on
/// the session bus and says a host is registered (`IsStatusNotifierHostRegistered`).
pub fn tray_host_seen() -> bool {
    #[cfg(target_os = "linux")]
    {
        linux::session().is_ok_and(|bus| linux::tray_host_on(&bus))
    }
    #[cfg(not(target_os = "linux"))]
    {
        true
    }
}

/// Why no file dialog can open here, or `None` where one can.
pub fn no_file_dialog() -> Option<String> {
    #[cfg(target_os = "linux")]
    {
        let portal = linux::session().is_ok_and(|bus| linux::portal_on(&bus));
        (!portal && !linux::zenity_installed()).then(|| {
            "no file dialog here (no xdg-desktop-portal on the session bus, no zenity)".to_owned()
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

#[cfg(target_os = "linux")]
pub(super) mod linux {
    use std::time::Duration;
    use zbus::blocking::{Connection, connection};

    /// A call on the session bus waits no longer than this (the window waits on it).
    const CALL_TIMEOUT: Duration = Duration::from_secs(1);
    const WATCHER: &str = "org.kde.StatusNotifierWatcher";
    const PORTAL: &str = "org.freedesktop.portal.Desktop";
    const BUS: &str = "org.freedesktop.DBus";

    pub fn session() -> zbus::Result<Connection> {
        connection::Builder::session()?
            .method_timeout(CALL_TIMEOUT)
            .build()
    }

    /// A connection to the bus at `address` (the tests' private bus).
    #[cfg(test)]
    pub fn at(address: &str) -> zbus::Result<Connection> {
        connection::Builder::address(address)?
            .method_timeout(CALL_TIMEOUT)
            .build()
    }

    fn has_owner(bus: &Connection, name: &str) -> bool {
        bus.call_method(
            Some(BUS),
            "/org/freedesktop/DBus",
            Some(BUS),
            "NameHasOwner",
            &(name,),
        )
        .and_then(|reply| reply.body().deserialize::<bool>())
        .unwrap_or(false)
    }

    pub fn tray_host_on(bus: &Connection) -> bool {
        has_owner(bus, WATCHER)
            && bus
                .call_method(
                    Some(WATCHER),
                    "/StatusNotifierWatcher",
                    Some("org.freedesktop.DBus.Properties"),
                    "Get",
                    &(WATCHER, "IsStatusNotifierHostRegistered"),
                )
                .and_then(|reply| reply.body().deserialize::<zbus::zvariant::OwnedValue>())
                .is_ok_and(|value| bool::try_from(value).unwrap_or(false))
    }

    /// The portal runs, or the bus starts it when asked.
    pub fn portal_on(bus: &Connection) -> bool {
        has_owner(bus, PORTAL)
            || bus
                .call_method(
                    Some(BUS),
                    "/org/freedesktop/DBus",
                    Some(BUS),
                    "ListActivatableNames",
                    &(),
                )
                .and_then(|reply| reply.body().deserialize::<Vec<String>>())
                .is_ok_and(|names| names.iter().any(|n| n == PORTAL))
    }

    /// rfd's fallback where the portal fails.
    pub fn zenity_installed() -> bool {
        std::env::var_os("PATH").is_some_and(|path| {
            std::env::split_paths(&path).any(|dir| dir.join("zenity").is_file())
        })
    }
}

#[cfg(all(test, target_os = "linux"))]
#[path = "session_bus_tests.rs"]
mod tests;
