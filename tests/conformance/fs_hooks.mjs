// The module-resolve hook register.mjs installs on a Node without
// fs.globSync: 'fs' and 'node:fs', imported from inside the conformance
// package, resolve to fs_shim.mjs.
const shim = new URL('./fs_shim.mjs', import.meta.url).href;

export async function resolve(specifier, context, next) {
  if ((specifier === 'fs' || specifier === 'node:fs') && context.parentURL &&
      context.parentURL.includes('/@modelcontextprotocol/conformance/'))
    return { url: shim, shortCircuit: true };
  return next(specifier, context);
}
