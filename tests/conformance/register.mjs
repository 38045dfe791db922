// Preloaded (node --import) before the conformance suite: 0.1.16's (and 0.2's)
// dist/index.js imports globSync from 'fs', which Node 22 has and Node 20
// does not, so on a Node without fs.globSync the suite would not even load.
// There, a module-resolve hook (fs_hooks.mjs) gives the suite's own imports
// of 'fs' a module that adds one (fs_shim.mjs); everything else, and every
// Node that has fs.globSync, is left as it is.
import fs from 'node:fs';
import { register } from 'node:module';

if (typeof fs.globSync !== 'function')
  register('./fs_hooks.mjs', import.meta.url);
