//! The tray icon: the state at a glance (idle, busy, parked, engine down) as the icon's colour
//! and its tooltip, and a menu: Show/Hide, Preemption (`solo_priority`, the window's rollback
//! switch), Long reads give way (`give_way`, the window's switch beside it), Quit. On Linux it is a D-Bus StatusNotifierItem (tray-icon's
//! `ksni` backend, no GTK); with no session bus the app runs without it and says so once. On
//! Windows it is tray-icon's native notification-area icon, created on the window's thread,
//! whose message loop (winit's) serves its menu.
//!
//! Menu clicks act from tray-icon's own thread (the window may be hidden, when it draws no
//! frames): they show or hide the window through the window's one visibility (`Window`, so
//! Show/Hide shows a window the close notice hid in one click) and run service commands on the
//! background runtime. The icon registers on D-Bus even where no tray host shows it; the
//! window asks the session bus for a host at each close (`session_bus::tray_host_seen`).

use super::commands::{self, Command, TRAY};
use super::preemption::{
    GIVE_WAY_LABEL, Preemption, give_way_click, preemption_click, preemption_of,
};
use super::window::Window;
use crate::control::Control;
use crate::service::{EngineStatus, ServiceSnapshot};
use tray_icon::menu::{CheckMenuItem, Menu, MenuEvent, MenuItem, PredefinedMenuItem};
use tray_icon::{Icon, TrayIcon, TrayIconBuilder};

/// The tray's Preemption item (the window's switch in short).
const PREEMPTION_ITEM: &str = "Preemption (short requests may interrupt long ones)";

/// The tray's two switches apart from their menu (which needs a tray host): the check marks
/// they show and the commands a click sends, the same as the window's.
#[derive(Debug, Clone, Copy, Default)]
pub struct PreemptionItem;

impl PreemptionItem {
    /// Checked when `solo_priority` is on.
    pub fn checked(s: &ServiceSnapshot) -> bool {
        preemption_of(s) == Preemption::On
    }

    /// Preemption's click: `solo_priority` flipped (nothing in batch mode).
    pub fn click(&self, s: &ServiceSnapshot) -> Option<Command> {
        preemption_click(s)
    }

    /// The give-way item's click.
    pub fn give_way_click(&self, s: &ServiceSnapshot) -> Command {
        give_way_click(s)
    }
}

/// Runs a command of the tray's menu through the control plane, as made by the tray.
pub async fn tray_command(command: Command, control: Control) -> Option<commands::Outcome> {
    let service = control.service();
    commands::run(command, service, control, TRAY).await
}

/// The state the icon shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrayState {
    Idle,
    Busy,
    Parked,
    EngineDown,
}

impl TrayState {
    pub fn of(s: &ServiceSnapshot) -> Self {
        if !matches!(s.engine.status, EngineStatus::Ready) {
            Self::EngineDown
        } else if !s.parked.is_empty() {
            Self::Parked
        } else if s.slots.iter().any(|slot| slot.request_id.is_some()) || !s.waiting.is_empty() {
            Self::Busy
        } else {
            Self::Idle
        }
    }

    fn words(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Busy => "busy",
            Self::Parked => "a stream is parked",
            Self::EngineDown => "engine down",
        }
    }

    fn rgb(self) -> [u8; 3] {
        match self {
            Self::Idle => [70, 170, 90],
            Self::Busy => [60, 120, 220],
            Self::Parked => [230, 160, 40],
            Self::EngineDown => [210, 50, 40],
        }
    }
}

const SIZE: u32 = 32;

/// A filled disc in the state's colour (drawn here: four colours need no image files).
fn disc(rgb: [u8; 3]) -> Option<Icon> {
    Icon::from_rgba(disc_rgba(rgb), SIZE, SIZE).ok()
}

fn disc_rgba(rgb: [u8; 3]) -> Vec<u8> {
    let centre = (SIZE as f32 - 1.0) / 2.0;
    let mut rgba = Vec::with_capacity((SIZE * SIZE * 4) as usize);
    for y in 0..SIZE {
        for x in 0..SIZE {
            let d = ((x as f32 - centre).powi(2) + (y as f32 - centre).powi(2)).sqrt();
            let alpha = ((centre + 0.5 - d).clamp(0.0, 1.0) * 255.0) as u8;
            rgba.extend_from_slice(&[rgb[0], rgb[1], rgb[2], alpha]);
        }
    }
    rgba
}

pub struct Tray {
    icon: TrayIcon,
    give_way: CheckMenuItem,
    preemption: CheckMenuItem,
    /// Observes the snapshots `update` gets; the menu's handler asks it what a click sends.
    shown: Option<(TrayState, bool, bool)>,
}

impl std::fmt::Debug for Tray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tray").field("shown", &self.shown).finish()
    }
}

impl Tray {
    /// The icon and its menu, or `None` (said once in the log) where there is no tray.
    pub fn start(
        ctx: egui::Context,
        control: Control,
        runtime: tokio::runtime::Handle,
        window: Window,
    ) -> Option<Self> {
        let show = MenuItem::new("Show/Hide", true, None);
        let preemption = CheckMenuItem::new(PREEMPTION_ITEM, true, false, None);
        let give_way = CheckMenuItem::new(GIVE_WAY_LABEL, true, false, None);
        let quit = MenuItem::new("Quit", true, None);
        let menu = Menu::new();
        let built = menu
            .append(&show)
            .and_then(|()| menu.append(&preemption))
            .and_then(|()| menu.append(&give_way))
            .and_then(|()| menu.append(&PredefinedMenuItem::separator()))
            .and_then(|()| menu.append(&quit));
        if let Err(e) = built {
            tracing::warn!("no tray icon: its menu failed: {e}");
            return None;
        }
        let mut builder = TrayIconBuilder::new()
            .with_tooltip("Strata Desk")
            .with_title("Strata Desk")
            .with_menu(Box::new(menu));
        if let Some(icon) = disc(TrayState::Idle.rgb()) {
            builder = builder.with_icon(icon);
        }
        let icon = match builder.build() {
            Ok(icon) => icon,
            Err(e) => {
                let why = if cfg!(target_os = "linux") {
                    "no D-Bus session or tray host here"
                } else {
                    "the system refused it"
                };
                tracing::warn!("no tray icon ({e}): {why}; the app runs without it");
                return None;
            }
        };
        let (show_id, give_way_id, quit_id) =
            (show.id().clone(), give_way.id().clone(), quit.id().clone());
        let preemption_id = preemption.id().clone();
        MenuEvent::set_event_handler(Some(move |event: MenuEvent| {
            let service = control.service();
            let s = service.snapshot();
            let command = if event.id == preemption_id {
                PreemptionItem.click(&s)
            } else if event.id == give_way_id {
                Some(PreemptionItem.give_way_click(&s))
            } else {
                None
            };
            if let Some(command) = command {
                let control = control.clone();
                runtime.spawn(async move {
                    let outcome = tray_command(command, control).await;
                    tracing::info!("tray: {outcome:?}");
                });
            } else if event.id == show_id {
                window.show_or_hide(&ctx);
            } else if event.id == quit_id {
                // Quit ends the app, window or not (closing the window only hides it)
                window.quit(&ctx);
            }
            ctx.request_repaint();
        }));
        Some(Self {
            icon,
            give_way,
            preemption,
            shown: None,
        })
    }

    /// Shows the snapshot's state (only what changed).
    pub fn update(&mut self, s: &ServiceSnapshot) {
        let state = TrayState::of(s);
        // the menu flips its own check marks on a click the service may refuse
        let preemption_on = PreemptionItem::checked(s);
        if self.preemption.is_checked() != preemption_on {
            self.preemption.set_checked(preemption_on);
        }
        let gives_way = s.give_way != crate::service::GiveWay::Off;
        if self.give_way.is_checked() != gives_way {
            self.give_way.set_checked(gives_way);
        }
        let solo_allowed = s.engine.parallel < 2;
        let now = (state, s.solo_priority, solo_allowed);
        if self.shown == Some(now) {
            return;
        }
        self.shown = Some(now);
        let _ = self.icon.set_icon(disc(state.rgb()));
        let _ = self.icon.set_tooltip(Some(format!(
            "Strata Desk: {}{}",
            state.words(),
            if s.solo_priority {
                ", preemption on"
            } else {
                ""
            }
        )));
        self.preemption.set_enabled(solo_allowed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::SchedulerSettings;

    #[test]
    fn the_tray_shows_engine_down_before_parked_before_busy() {
        let mut s = ServiceSnapshot::starting(SchedulerSettings::default(), 1, true);
        assert_eq!(TrayState::of(&s), TrayState::EngineDown);
        s.engine.status = EngineStatus::Ready;
        assert_eq!(TrayState::of(&s), TrayState::Idle);
        s.waiting.push(crate::service::WaitingView {
            request_id: crate::ids::RequestId(3),
            priority: 0,
            effective_priority: 0,
            boost: 0,
            aging: 0,
            waited_secs: 1.0,
            tokens_left_to_read: 10,
        });
        assert_eq!(TrayState::of(&s), TrayState::Busy);
    }

    #[test]
    fn the_icon_is_a_disc_with_transparent_corners() {
        let rgba = disc_rgba([1, 2, 3]);
        let alpha = |x: u32, y: u32| rgba[((y * SIZE + x) * 4 + 3) as usize];
        assert_eq!(alpha(0, 0), 0);
        assert_eq!(alpha(SIZE / 2, SIZE / 2), 255);
        assert_eq!(&rgba[..3], &[1, 2, 3]);
        assert!(disc([1, 2, 3]).is_some());
    }
}
