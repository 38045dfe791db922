// node:fs, plus the globSync of Node 22 that the conformance suite 0.1.16
// imports: enough of it for the one way the suite calls it,
// globSync('**/checks.json', {cwd}), the paths relative to cwd of the files
// under it named as the pattern's last part.
import fs from 'node:fs';
import path from 'node:path';

export * from 'node:fs';
export default fs;

export function globSync(pattern, opts = {}) {
  const cwd = opts.cwd ?? process.cwd();
  const name = pattern.split('/').pop();
  const out = [];
  const walk = (dir) => {
    for (const e of fs.readdirSync(path.join(cwd, dir), { withFileTypes: true })) {
      const rel = dir ? path.join(dir, e.name) : e.name;
      if (e.isDirectory()) walk(rel);
      else if (e.name === name) out.push(rel);
    }
  };
  walk('');
  return out;
}
