//! The window's visibility, one source of truth: a close, the close notice, the tray's
//! Show/Hide, a second start and SIGTERM all hide, show or close the window through it, so
//! each knows whether the window is hidden whatever hid it (the tray's Show/Hide shows a
//! window the notice hid in one click).

use egui::ViewportCommand;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, Clone, Default)]
pub struct Window {
    hidden: Arc<AtomicBool>,
    /// Quit was chosen (the tray's, the notice's, SIGTERM): the next close ends the app.
    quitting: Arc<AtomicBool>,
}

impl Window {
    /// Hides the window (the app keeps serving in the tray).
    pub fn hide(&self, ctx: &egui::Context) {
        self.hidden.store(true, Ordering::SeqCst);
        ctx.send_viewport_cmd(ViewportCommand::Visible(false));
        ctx.request_repaint();
    }

    /// Minimises the window (where no tray shows the icon).
    pub fn minimise(&self, ctx: &egui::Context) {
        ctx.send_viewport_cmd(ViewportCommand::Minimized(true));
        ctx.request_repaint();
    }

    /// Brings the window to the front: shown, un-minimised, focus asked (a compositor may
    /// refuse focus).
    pub fn show(&self, ctx: &egui::Context) {
        self.hidden.store(false, Ordering::SeqCst);
        ctx.send_viewport_cmd(ViewportCommand::Visible(true));
        ctx.send_viewport_cmd(ViewportCommand::Minimized(false));
        ctx.send_viewport_cmd(ViewportCommand::Focus);
        ctx.request_repaint();
    }

    pub fn is_hidden(&self) -> bool {
        self.hidden.load(Ordering::SeqCst)
    }

    /// The tray's Show/Hide: a hidden or minimised window is shown, a shown one hidden.
    /// Whether it is shown now.
    pub fn show_or_hide(&self, ctx: &egui::Context) -> bool {
        let minimised = ctx.input(|i| i.viewport().minimized) == Some(true);
        if self.is_hidden() || minimised {
            self.show(ctx);
            true
        } else {
            self.hide(ctx);
            false
        }
    }

    /// Ends the app (the window closes even where a close would hide it).
    pub fn quit(&self, ctx: &egui::Context) {
        self.quitting.store(true, Ordering::SeqCst);
        // a hidden window takes its commands once shown
        ctx.send_viewport_cmd(ViewportCommand::Visible(true));
        ctx.send_viewport_cmd(ViewportCommand::Close);
        ctx.request_repaint();
    }

    pub fn quitting(&self) -> bool {
        self.quitting.load(Ordering::SeqCst)
    }
}
