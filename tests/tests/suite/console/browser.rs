//! A real browser for the console tests: Debian's headless Chromium driven
//! through WebDriver by its `chromedriver`, which is started on a free port
//! and stopped by pid (its whole process group, so no Chromium is left
//! behind), also when a test fails.
//!
//! Starting the two is most of a console test's time (~1.5 s of ~2.5 s),
//! so the tests of the binary share them: a test borrows an idle browser
//! ([`Browser::borrow`]) and gives it back once it passed
//! ([`Browser::give_back`]); a failed test's browser is stopped, never
//! reused. The WebDriver sessions run on a runtime of their own, which
//! outlives every test's, and the browsers still idle when the binary
//! exits are stopped then (`atexit`).
//!
//! `./scripts/browser.sh --setup-only` installs both and prints the
//! chromedriver path; the test command exports it as `CHROMEDRIVER` and sets
//! `REQUIRE_BROWSER=1`, so a missing browser fails the run instead of
//! skipping the test — as it does wherever `CI=true`.

use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How long a condition may take to appear in the page.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A program on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// Where chromedriver is: `CHROMEDRIVER`, else `chromedriver` on `PATH`.
/// `None` means the calling test cannot run: it fails where a browser is
/// required ([`required`]), and otherwise says it skips and why.
pub fn chromedriver() -> Option<PathBuf> {
    let found = std::env::var_os("CHROMEDRIVER")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .or_else(|| on_path("chromedriver"));
    if found.is_none() {
        let how =
            "install Debian's chromium and chromium-driver: ./scripts/browser.sh --setup-only";
        if let Some(why) = required() {
            panic!("{why} but no chromedriver was found (CHROMEDRIVER or PATH); {how}");
        }
        let test = std::thread::current()
            .name()
            .unwrap_or("a console test")
            .to_owned();
        // Straight to stderr, past the test harness's capture, so a skip is
        // seen.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: {test} needs chromedriver; {how}"
        );
    }
    found
}

/// Why a missing browser fails the tests rather than skipping them, if it
/// does: `REQUIRE_BROWSER=1` (the test command), or `CI=true` (CI, even a
/// run that did not go through the test command).
fn required() -> Option<&'static str> {
    let set = |name: &str, values: &[&str]| {
        std::env::var(name).is_ok_and(|v| values.iter().any(|x| v.eq_ignore_ascii_case(x)))
    };
    if set("REQUIRE_BROWSER", &["1"]) {
        Some("REQUIRE_BROWSER=1")
    } else if set("CI", &["true", "1"]) {
        Some("CI=true")
    } else {
        None
    }
}

/// A running chromedriver, stopped (with its process group: every
/// Chromium it started) when dropped — also when the test panics.
struct Driver {
    child: Child,
    log: PathBuf,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = saga_tests::process::stop(&mut self.child, Duration::from_secs(3));
    }
}

/// chromedriver and the WebDriver session of one headless Chromium.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Driver,
    _profile: tempfile::TempDir,
    _logs: tempfile::TempDir,
}

/// The browsers of this test binary not lent to a test, and the runtime
/// their WebDriver sessions run on.
struct Pool {
    sessions: tokio::runtime::Runtime,
    idle: Mutex<Vec<Browser>>,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        extern "C" fn stop_idle() {
            let idle = POOL.get().map(|pool| {
                std::mem::take(&mut *pool.idle.lock().unwrap_or_else(PoisonError::into_inner))
            });
            // Dropping a browser stops its chromedriver and Chromium.
            let _ = std::panic::catch_unwind(|| drop(idle));
        }
        // SAFETY: registers a plain function, run once at exit.
        unsafe { libc::atexit(stop_idle) };
        let sessions = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("the WebDriver sessions' runtime");
        Pool {
            sessions,
            idle: Mutex::new(Vec::new()),
        }
    })
}

impl Browser {
    /// An idle browser of this binary, or a new one.
    pub async fn borrow(chromedriver: &Path) -> Browser {
        let pool = pool();
        let idle = pool
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        if let Some(browser) = idle {
            return browser;
        }
        let chromedriver = chromedriver.to_owned();
        match pool.sessions.spawn(Browser::start(chromedriver)).await {
            Ok(browser) => browser,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    /// Leaves the page (its event streams end with it) and keeps the
    /// browser for the next test.
    pub async fn give_back(mut self) {
        self.open("about:blank").await;
        pool()
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(self);
    }

    /// Starts `chromedriver` on a free port and opens a headless Chromium
    /// with a fresh profile.
    async fn start(chromedriver: PathBuf) -> Browser {
        let port = free_port();
        let logs = tempfile::tempdir().expect("log dir");
        let log = logs.path().join("chromedriver.log");
        let mut cmd = Command::new(&chromedriver);
        cmd.arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let child = saga_tests::process::spawn_tied(cmd).expect("start chromedriver");
        let driver = Driver { child, log };
        let profile = tempfile::tempdir().expect("profile dir");
        let mut browser = Browser {
            client: connect(port, profile.path()).await,
            driver,
            _profile: profile,
            _logs: logs,
        };
        if let Err(e) = browser.client.set_window_size(1400, 1000).await {
            browser.fail(&format!("window size: {e}"));
        }
        browser
    }

    /// Panics with `what` and the end of chromedriver's log.
    pub fn fail(&mut self, what: &str) -> ! {
        let tail = saga_tests::process::log_tail(&self.driver.log, 20).join("\n");
        panic!("{what}\n--- chromedriver log (end):\n{tail}");
    }

    /// Opens `url`.
    pub async fn open(&mut self, url: &str) {
        if let Err(e) = self.client.goto(url).await {
            self.fail(&format!("cannot open {url}: {e}"));
        }
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the
    /// page and returns what it returns.
    pub async fn eval(&mut self, script: &str, args: Vec<Value>) -> Value {
        match self.client.execute(script, args).await {
            Ok(value) => value,
            Err(e) => self.fail(&format!("script failed: {e}\n{script}")),
        }
    }

    /// Polls `script` until it returns something truthy (not null, false,
    /// 0 or ""), and returns that; fails after [`PATIENCE`] saying `what`
    /// was expected and what the page showed.
    pub async fn wait_for(&mut self, what: &str, script: &str, args: Vec<Value>) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let value = self.eval(script, args.clone()).await;
            let truthy = !matches!(&value, Value::Null | Value::Bool(false))
                && value != json!(0)
                && value != json!("");
            if truthy {
                return value;
            }
            if Instant::now() > deadline {
                let text = self.eval("return document.body.innerText;", vec![]).await;
                let text = text.as_str().unwrap_or_default().to_owned();
                self.fail(&format!(
                    "timed out waiting for {what}; the page shows:\n{text}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A PNG of the whole page (the window is fitted to its height for
    /// the shot, then restored), written to `path`.
    pub async fn screenshot(&mut self, path: &Path) {
        // The page's height plus what the window takes besides the page.
        let height = self
            .eval(
                "return Math.ceil(document.body.getBoundingClientRect().height) + window.outerHeight - window.innerHeight;",
                vec![],
            )
            .await
            .as_u64()
            .unwrap_or(1000)
            .clamp(400, 4000);
        let fitted = self.client.set_window_size(1400, height as u32).await;
        let png = self.client.screenshot().await;
        let restored = self.client.set_window_size(1400, 1000).await;
        let png = match (fitted, png, restored) {
            (Ok(()), Ok(png), Ok(())) => png,
            (fitted, png, restored) => self.fail(&format!(
                "screenshot: {:?} {:?} {:?}",
                fitted.err(),
                png.err(),
                restored.err()
            )),
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot dir");
        }
        std::fs::write(path, png).expect("write screenshot");
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Opens a session once chromedriver answers: headless Chromium as these
/// machines run it (as root: no sandbox), no network of its own, a fresh
/// profile.
async fn connect(port: u16, profile: &Path) -> Client {
    let mut args = vec![
        "--headless".to_owned(),
        "--no-sandbox".to_owned(),
        "--disable-gpu".to_owned(),
        "--disable-dev-shm-usage".to_owned(),
        "--disable-background-networking".to_owned(),
        "--disable-extensions".to_owned(),
        "--disable-sync".to_owned(),
        "--no-first-run".to_owned(),
        "--no-default-browser-check".to_owned(),
        "--window-size=1400,1000".to_owned(),
        format!("--user-data-dir={}", profile.display()),
    ];
    args.push("--lang=en-US".to_owned());
    let mut chrome = json!({ "args": args });
    if let Some(binary) = std::env::var_os("CHROMIUM").map(PathBuf::from) {
        chrome["binary"] = json!(binary);
    }
    let mut caps = Capabilities::new();
    caps.insert("browserName".into(), json!("chrome"));
    caps.insert("goog:chromeOptions".into(), chrome);
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(caps.clone())
            .connect(&url)
            .await
        {
            Ok(client) => return client,
            Err(e) if Instant::now() > deadline => panic!("no WebDriver session at {url}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
