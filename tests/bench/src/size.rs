//! Measurement 3: deployment size. The release binaries are already stripped (`strip = true` in
//! the workspace's release profile); the zip size is estimated as a DEFLATE level 9 stream of the
//! binary (gzip -9 through `flate2`), which is what a zip archive stores plus ~100 bytes of headers.

use std::io::Write;
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;

use crate::Result;
use crate::binaries::{FLOOR, FUNCTIONS, release_binary};

/// Target for an unzipped binary, in bytes (8 MB).
pub const TARGET_BYTES: u64 = 8 * 1024 * 1024;

/// Where arm64 `bootstrap`s from `cargo lambda build --release --arm64` (what `sam build` runs)
/// are looked for: `$TOCSIN_BENCH_ARM64_DIR/<function>/bootstrap`, by default `target/lambda`.
pub fn arm64_dir() -> PathBuf {
    std::env::var_os("TOCSIN_BENCH_ARM64_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::binaries::target_dir().join("lambda"))
}

#[derive(Debug, Clone)]
pub struct BinarySize {
    pub function: String,
    pub target: &'static str,
    pub path: PathBuf,
    pub bytes: u64,
    pub deflated_bytes: u64,
    /// When the binary was built (file modification time).
    pub built: String,
}

fn deflated(path: &Path) -> Result<u64> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::best());
    gz.write_all(&std::fs::read(path)?)?;
    Ok(gz.finish()?.len() as u64)
}

fn measure_one(function: &str, target: &'static str, path: PathBuf) -> Result<BinarySize> {
    let meta = std::fs::metadata(&path)?;
    let built = meta
        .modified()
        .map(|t| chrono::DateTime::<chrono::Utc>::from(t).format("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_default();
    Ok(BinarySize {
        function: function.to_owned(),
        target,
        deflated_bytes: deflated(&path)?,
        bytes: meta.len(),
        path,
        built,
    })
}

/// Host (x86_64) release binaries, then any arm64 `bootstrap`s found under [`arm64_dir`].
pub fn measure() -> Vec<Result<BinarySize>> {
    let mut out = Vec::new();
    for name in FUNCTIONS.iter().map(|f| f.binary).chain([FLOOR]) {
        out.push(release_binary(name).and_then(|p| measure_one(name, "x86_64-unknown-linux-gnu (host)", p)));
    }
    for name in FUNCTIONS.iter().map(|f| f.binary).chain(["sms-preferences"]) {
        let p = arm64_dir().join(name).join("bootstrap");
        if p.is_file() {
            out.push(measure_one(name, "aarch64 (cargo lambda --arm64)", p));
        }
    }
    out
}
