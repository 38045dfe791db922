// After the conformance suite: reads the checks.json it saved for each
// scenario (-o RESULTS) and says, for each scenario that failed, which
// checks failed and why. The suite's baseline (expected-failures.yaml,
// `server`) is by scenario; this adds the same rule by check, from the
// file's `failing_checks` (which the suite does not read): a scenario named
// there may fail only by those checks, so its other checks must pass. Exit
// 1 when one does not, or when a scenario outside the baseline failed
// (the suite says so too; here its checks are shown in full).
//
// usage: node check_results.mjs RESULTS EXPECTED_FAILURES_YAML CONFORMANCE_PACKAGE_DIR
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const [results, baselineFile, pkgDir] = process.argv.slice(2);
// the yaml parser the suite itself uses, from its own dependencies
const { parse } = createRequire(path.join(pkgDir, 'package.json'))('yaml');
const baseline = parse(readFileSync(baselineFile, 'utf8')) ?? {};
const expected = new Set(baseline.server ?? []);
const allowed = baseline.failing_checks ?? {};

const failing = (c) => c.status === 'FAILURE' || c.status === 'WARNING';
const brief = (v) => {
  const s = JSON.stringify(v, null, 1) ?? '';
  return s.length > 3000 ? `${s.slice(0, 3000)}...` : s;
};

let bad = 0;
const dirs = readdirSync(results).sort();
for (const dir of dirs) {
  const m = /^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$/.exec(dir);
  if (!m) continue;
  const scenario = m[1];
  const checks = JSON.parse(readFileSync(path.join(results, dir, 'checks.json'), 'utf8'));
  const failed = checks.filter(failing);
  if (failed.length === 0) continue;
  for (const c of failed) {
    const ok = expected.has(scenario) && (!allowed[scenario] || allowed[scenario].includes(c.id));
    if (ok) {
      console.log(`expected: ${scenario}: ${c.id} ${c.status}: ${c.errorMessage ?? c.description}`);
    } else {
      bad++;
      console.log(`UNEXPECTED: ${scenario}: ${c.id} ${c.status}: ${c.errorMessage ?? c.description}`);
      if (c.details) console.log(`  details: ${brief(c.details)}`);
    }
  }
}
if (dirs.length === 0) {
  console.log(`no results in ${results}`);
  bad++;
}
process.exit(bad ? 1 : 0);
