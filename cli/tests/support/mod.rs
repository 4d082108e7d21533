//! What every test of the `apf` binary needs: running it, its output as
//! text, and a scratch directory that is removed when the test ends.
//! Included by each test file with `mod support;`.
#![allow(dead_code)] // not every test file uses every helper

use std::ops::Deref;
use std::path::Path;
use std::process::{Command, Output};
use tempfile::TempDir;

/// Runs the `apf` binary built for these tests with `args`.
pub fn apf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_apf"))
        .args(args)
        .output()
        .expect("the apf binary runs")
}

/// The standard output, which must be UTF-8 (a user's terminal or a
/// script reads it; garbled bytes would be a bug of their own).
pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("UTF-8 standard output")
}

/// The standard error, which must be UTF-8 as well.
pub fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("UTF-8 standard error")
}

/// A fresh, empty directory for one test's files, named after the test
/// (`apf-cli-<test>-<random>` in the system's temporary directory) and
/// removed when it goes out of scope. When the test fails the directory
/// is kept and its path printed, so the files it wrote can be looked at.
pub struct Scratch(Option<TempDir>);

pub fn scratch(test: &str) -> Scratch {
    let dir = tempfile::Builder::new()
        .prefix(&format!("apf-cli-{test}-"))
        .tempdir()
        .expect("scratch directory");
    Scratch(Some(dir))
}

impl Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        self.0.as_ref().expect("taken only on drop").path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let Some(dir) = self.0.take() else { return };
        if std::thread::panicking() {
            eprintln!(
                "the failed test's files are kept in {}",
                dir.keep().display()
            );
        }
        // Otherwise dropping the TempDir removes the directory and its files.
    }
}
