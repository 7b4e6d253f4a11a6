/**
 * The port a child process of the example announces: its `READY <port>`
 * line on stdout (what src/main.js and src/store-main.js print once they
 * listen), or a rejection when it exits first.
 */
export function readyPort(child) {
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = /^READY (\d+)$/m.exec(out);
      if (m) resolve(Number(m[1]));
    });
    child.once('exit', (code) => reject(new Error(`exited ${code} before READY`)));
  });
}
