//! Where compiled kernels and autotune results are kept between runs.
//!
//! A fresh process on a CubeCL runtime compiles every kernel it launches and autotunes the
//! matmuls and reductions it meets: every candidate kernel is compiled and timed. That is
//! minutes before the first step on a new machine (docs/gpt2.md, "A warm start"). CubeCL
//! can keep both on disk, its autotune results and (CUDA) the compiled PTX; Mesa keeps
//! what its Vulkan drivers compiled, llvmpipe included. Left to themselves they write to
//! three places: `target/` of the Cargo project the process runs in (or the user's cache
//! directory outside one), nowhere for PTX, and Mesa's own cache directory.
//!
//! [`init_kernel_cache`] puts all of it under one directory, by default
//! `<user cache dir>/leanburn` (`~/.cache/leanburn` on Linux), or `LEANBURN_CACHE_DIR`:
//!
//! - `cubecl/autotune/…`: the fastest kernel per operation and shape bucket, per device;
//! - `cubecl/cuda/<CubeCL version>/ptx…`: compiled CUDA kernels;
//! - `mesa/`: Mesa's shader cache (set only where `MESA_SHADER_CACHE_DIR` is unset).
//!
//! Copying that directory to another machine with the same device, driver and leanburn
//! build ships a warm start.

use std::env;
use std::fmt;
use std::path::{Path, PathBuf};

use cubecl::config::cache::CacheConfig;
use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig};

/// The variable that overrides the default cache directory (`off` turns the cache off).
pub const CACHE_DIR_VAR: &str = "LEANBURN_CACHE_DIR";

/// CubeCL's own configuration files, looked for in the working directory and its parents.
const CUBECL_CONFIG_FILES: [&str; 4] = ["cubecl.toml", "CubeCL.toml", "burn.toml", "Burn.toml"];

/// Where to keep kernels and autotune results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelCache {
    /// `LEANBURN_CACHE_DIR` when set (`off` means [`Off`](Self::Off)), else
    /// `<user cache dir>/leanburn`.
    Default,
    /// This directory.
    At(PathBuf),
    /// Leave CubeCL and Mesa as they are configured without leanburn.
    Off,
}

impl KernelCache {
    /// The directory this choice resolves to, or `None` for off (or, for the default, a
    /// system with no user cache directory).
    pub fn dir(&self) -> Option<PathBuf> {
        match self {
            Self::At(dir) => Some(dir.clone()),
            Self::Off => None,
            Self::Default => match env::var_os(CACHE_DIR_VAR) {
                Some(value) if value == "off" => None,
                Some(value) if !value.is_empty() => Some(PathBuf::from(value)),
                _ => dirs::cache_dir().map(|dir| dir.join("leanburn")),
            },
        }
    }
}

impl std::str::FromStr for KernelCache {
    type Err = String;

    /// `off`, or a directory.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "" => Err("expected a directory or `off`".into()),
            "off" => Ok(Self::Off),
            dir => Ok(Self::At(dir.into())),
        }
    }
}

/// What [`init_kernel_cache`] set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelCacheSetup {
    /// Autotune results and compiled kernels go under `dir`; `mesa` says whether Mesa's
    /// shader cache does too (it does not when `MESA_SHADER_CACHE_DIR` was already set).
    At { dir: PathBuf, mesa: bool },
    /// A CubeCL configuration file governs the caches; leanburn left them alone.
    ConfigFile(PathBuf),
    /// The cache is off: CubeCL and Mesa use their own defaults.
    Off,
}

impl fmt::Display for KernelCacheSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::At { dir, mesa } => write!(
                f,
                "kernel cache: {}{}",
                dir.display(),
                if *mesa { "" } else { " (Mesa's shader cache stays at MESA_SHADER_CACHE_DIR)" }
            ),
            Self::ConfigFile(file) => write!(f, "kernel cache: as configured in {}", file.display()),
            Self::Off => write!(f, "kernel cache: off"),
        }
    }
}

/// Why the cache could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum KernelCacheError {
    #[error(
        "the CubeCL runtime configuration was already read or set; set up the kernel cache before any kernel runs"
    )]
    AlreadyConfigured,
    #[error("cannot create the kernel cache directory {dir}: {source}")]
    CreateDir { dir: PathBuf, source: std::io::Error },
}

/// Keeps autotune results and compiled kernels under `cache`'s directory (see the
/// module docs (`src/device/kernel_cache.rs`)). A `cubecl.toml` or `burn.toml` in the working directory or a
/// parent, which CubeCL would read, wins: nothing is changed then. CubeCL's environment
/// overrides (`CUBECL_AUTOTUNE_LEVEL`, `CUBECL_DEBUG_LOG`) still apply.
///
/// # Safety
///
/// It may set `MESA_SHADER_CACHE_DIR`, which is only sound while no other thread can read
/// the environment: call it first thing in `main`, before anything starts a thread.
///
/// # Errors
///
/// [`KernelCacheError::AlreadyConfigured`] once CubeCL has read its configuration (a
/// kernel ran, or this was called before), and a directory that cannot be created.
pub unsafe fn init_kernel_cache(cache: &KernelCache) -> Result<KernelCacheSetup, KernelCacheError> {
    if CubeClRuntimeConfig::storage().lock().is_some() {
        return Err(KernelCacheError::AlreadyConfigured);
    }
    let Some(dir) = cache.dir() else { return Ok(KernelCacheSetup::Off) };
    if let Some(file) = env::current_dir().ok().and_then(|cwd| cubecl_config_file(&cwd)) {
        return Ok(KernelCacheSetup::ConfigFile(file));
    }
    std::fs::create_dir_all(&dir).map_err(|source| KernelCacheError::CreateDir { dir: dir.clone(), source })?;
    let cubecl = CacheConfig::File(dir.join("cubecl"));
    let mut config = CubeClRuntimeConfig::default().override_from_env();
    config.autotune.cache = cubecl.clone();
    config.compilation.cache = Some(cubecl);
    {
        // Checked and set under one lock, so a concurrent first read cannot slip between.
        let mut stored = CubeClRuntimeConfig::storage().lock();
        if stored.is_some() {
            return Err(KernelCacheError::AlreadyConfigured);
        }
        *stored = Some(std::sync::Arc::new(config));
    }
    let mesa = env::var_os("MESA_SHADER_CACHE_DIR").is_none();
    if mesa {
        // SAFETY: the caller guarantees that no other thread reads the environment.
        unsafe { env::set_var("MESA_SHADER_CACHE_DIR", dir.join("mesa")) };
    }
    Ok(KernelCacheSetup::At { dir, mesa })
}

/// The CubeCL configuration file CubeCL itself would read from `dir`, if any.
fn cubecl_config_file(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().flat_map(|dir| CUBECL_CONFIG_FILES.map(|name| dir.join(name))).find(|file| file.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_taken_as_given_and_off_is_none() {
        assert_eq!(KernelCache::At("/x/y".into()).dir(), Some(PathBuf::from("/x/y")));
        assert_eq!(KernelCache::Off.dir(), None);
        assert_eq!("off".parse(), Ok(KernelCache::Off));
        assert_eq!("/x".parse(), Ok(KernelCache::At("/x".into())));
        assert!("".parse::<KernelCache>().is_err());
    }

    #[test]
    fn a_config_file_in_a_parent_is_found() {
        let root = env::temp_dir().join(format!("leanburn-cubecl-config-{}", std::process::id()));
        let nested = root.join("a/b");
        std::fs::create_dir_all(&nested).unwrap();
        // Control: without the file nothing under `root` is found.
        assert!(cubecl_config_file(&nested).is_none_or(|file| !file.starts_with(&root)));
        std::fs::write(root.join("burn.toml"), "[cubecl]\n").unwrap();
        assert_eq!(cubecl_config_file(&nested), Some(root.join("burn.toml")));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
