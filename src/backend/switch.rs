//! A process-wide on/off setting whose default comes from the environment, read once.

use std::sync::atomic::{AtomicU8, Ordering};

const UNSET: u8 = 0;
const ON: u8 = 1;
const OFF: u8 = 2;

/// An on/off setting: what [`Switch::set`] stored, else the default given on first read,
/// kept from then on (so the environment is read once, not on every op).
pub(crate) struct Switch(AtomicU8);

impl Switch {
    /// A switch nothing has set or read yet.
    pub(crate) const fn unset() -> Self {
        Self(AtomicU8::new(UNSET))
    }

    pub(crate) fn set(&self, on: bool) {
        self.0.store(if on { ON } else { OFF }, Ordering::Relaxed);
    }

    /// The setting, or `default()`'s where nothing set it.
    pub(crate) fn get(&self, default: impl FnOnce() -> bool) -> bool {
        match self.0.load(Ordering::Relaxed) {
            ON => true,
            OFF => false,
            _ => {
                let value = default();
                // A setting made meanwhile wins.
                let stored = if value { ON } else { OFF };
                let _ = self.0.compare_exchange(UNSET, stored, Ordering::Relaxed, Ordering::Relaxed);
                self.0.load(Ordering::Relaxed) == ON
            }
        }
    }
}

/// Whether the environment variable `name` is set to `value` (ignoring case).
pub(crate) fn env_is(name: &str, value: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v.eq_ignore_ascii_case(value))
}

#[cfg(test)]
mod tests {
    use super::Switch;

    #[test]
    fn a_switch_falls_back_to_its_default_once_where_unset() {
        let switch = Switch::unset();
        assert!(switch.get(|| true));
        assert!(switch.get(|| false), "the first default is kept");
        let switch = Switch::unset();
        assert!(!switch.get(|| false));
        switch.set(false);
        assert!(!switch.get(|| true));
        switch.set(true);
        assert!(switch.get(|| false));
    }
}
