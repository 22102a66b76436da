//! A small filesystem of its own over a directory, to make a process's writes there fail with
//! ENOSPC on demand: a tmpfs of a given size, or, where tmpfs cannot be mounted, a loop-mounted
//! ext4 image. [`SmallDisk::fill`] takes all its free space, [`SmallDisk::free`] gives it back.
//! Unmounted when dropped.
//!
//! Mounting needs root (CAP_SYS_ADMIN) and the `mount`, `umount` and `mkfs.ext4` tools, which
//! the ground installs. Where neither form can be mounted, [`SmallDisk::mount`] fails with
//! [`DiskError::Unavailable`], naming each form's cause (a missing tool by its name): a test
//! fails on it, since a ground that cannot mount is a broken ground, not a reason to skip.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

/// Why a small filesystem could not be had.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// Neither form could be mounted here (no privilege, or a tool missing, named).
    #[error("cannot mount a small filesystem here: {0}")]
    Unavailable(String),
    /// Anything else.
    #[error("small filesystem at {}: {source}", path.display())]
    Io {
        /// Where.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// A mounted small filesystem.
pub struct SmallDisk {
    dir: PathBuf,
    filler: PathBuf,
    /// The ext4 image of the loop form (deleted with it).
    image: Option<tempfile::TempDir>,
    /// Which form was mounted, for messages.
    pub kind: &'static str,
}

/// Runs `cmd`; the error names the command and its stderr, or the program when it is not
/// installed.
fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| {
        let program = cmd.get_program().to_string_lossy();
        if e.kind() == std::io::ErrorKind::NotFound {
            format!("the tool `{program}` is not installed (not found on PATH)")
        } else {
            format!("{cmd:?}: {e}")
        }
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl SmallDisk {
    /// Mounts a filesystem of about `size_kib` KiB over `dir` (created when missing).
    pub fn mount(dir: &Path, size_kib: u64) -> Result<Self, DiskError> {
        let io = |source| DiskError::Io {
            path: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let tmpfs = run(Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size_kib}k,mode=0755"),
                "tmpfs",
            ])
            .arg(dir));
        let (image, kind) = match tmpfs {
            Ok(()) => (None, "tmpfs"),
            Err(tmpfs_error) => match Self::mount_loop(dir, size_kib) {
                Ok(image) => (Some(image), "loop-mounted ext4"),
                Err(loop_error) => {
                    return Err(DiskError::Unavailable(format!(
                        "tmpfs: {tmpfs_error}; loop device: {loop_error}; \
                         FUSE: no FUSE filesystem with a size limit is installed"
                    )));
                }
            },
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            filler: dir.join(".filler"),
            image,
            kind,
        })
    }

    fn mount_loop(dir: &Path, size_kib: u64) -> Result<tempfile::TempDir, String> {
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        let image = tmp.path().join("disk.ext4");
        let file = std::fs::File::create(&image).map_err(|e| e.to_string())?;
        // ext4 needs room for its own metadata on top of what is asked for.
        file.set_len((size_kib + 1024) * 1024)
            .map_err(|e| e.to_string())?;
        run(Command::new("mkfs.ext4")
            .args(["-q", "-F", "-m", "0"])
            .arg(&image))?;
        run(Command::new("mount")
            .args(["-o", "loop"])
            .arg(&image)
            .arg(dir))?;
        Ok(tmp)
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes all free space with a filler file; returns its size in bytes. Afterwards a write
    /// that needs a new block fails with ENOSPC.
    pub fn fill(&self) -> Result<u64, DiskError> {
        let io = |source| DiskError::Io {
            path: self.filler.clone(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.filler)
            .map_err(io)?;
        let mut written = 0u64;
        // Big writes first, then smaller ones down to single bytes, so no partial block is
        // left free.
        for size in [64 * 1024, 4096, 512, 1] {
            let chunk = vec![0u8; size];
            loop {
                match file.write(&chunk) {
                    Ok(0) => break,
                    Ok(n) => written += n as u64,
                    Err(e) if e.kind() == std::io::ErrorKind::StorageFull => break,
                    Err(e) => return Err(io(e)),
                }
            }
        }
        match file.sync_all() {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull => {}
            Err(e) => return Err(io(e)),
        }
        Ok(written)
    }

    /// Deletes the filler file.
    pub fn free(&self) -> Result<(), DiskError> {
        match std::fs::remove_file(&self.filler) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(DiskError::Io {
                path: self.filler.clone(),
                source,
            }),
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        if run(Command::new("umount").arg(&self.dir)).is_err() {
            // Still in use (a process that was not stopped): detach it now, it goes away
            // when the last user does.
            let _ = run(Command::new("umount").arg("-l").arg(&self.dir));
        }
        drop(self.image.take());
    }
}
