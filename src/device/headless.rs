//! Quiet start-up on machines without a desktop session.
//!
//! Mesa's Vulkan drivers (llvmpipe included) print `error: XDG_RUNTIME_DIR is invalid or
//! not set in the environment.` twice whenever a Vulkan instance is created and that
//! variable is unset, as it is on most headless servers and in containers. It is
//! harmless, since nothing here uses a window system, but a user reads "error".

use std::env;

/// Sets `XDG_RUNTIME_DIR` to the temporary directory when it is unset, so that creating a
/// Vulkan instance prints nothing; a value already set is left alone. Mesa only checks
/// that the variable is set, and no display is looked for here.
///
/// # Safety
///
/// It changes the process environment, which is only sound while no other thread can
/// read it: call it first thing in `main`, before anything starts a thread.
pub unsafe fn quiet_headless_vulkan() {
    if env::var_os("XDG_RUNTIME_DIR").is_none() {
        env::set_var("XDG_RUNTIME_DIR", env::temp_dir());
    }
}
