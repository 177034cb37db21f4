const steps = process.argv.slice(2);
const r = () => (process.memoryUsage().rss / 1048576).toFixed(1);
let out = [`bare ${r()}`];
for (const s of steps) {
  if (s === 'cri') { const { loadCriPackage } = await import('/work/main/dist/src/runtime/proto.js'); loadCriPackage(); }
  else await import(s);
  await new Promise(r => setTimeout(r, 50));
  out.push(`${s.replace('/work/main/dist/src/','')} ${r()}`);
}
console.log(out.join(' | '));
