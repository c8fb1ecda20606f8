// The convention between a bench script and bench/run.mjs (bench/README.md): the script's LAST stdout line is
//   {"bench":"<name>","results":[{"name":"…","figure":<number>,"unit":"…","target":"<text, e.g. >= 0.4>","pass":true|false|null}]}
// (pass null: a figure for the record, no target), and the script exits 1 when any result misses its target.

/** A result line. `target` is [op, value] with op one of >=, <=, <, >; omit it for a figure without a target. */
export function result(name, figure, unit, target) {
  if (!target) return { name, figure: round(figure), unit, target: null, pass: null };
  const [op, value] = target;
  const pass = op === '>=' ? figure >= value : op === '<=' ? figure <= value : op === '<' ? figure < value : op === '>' ? figure > value : false;
  return { name, figure: round(figure), unit, target: `${op} ${value}`, pass };
}

const round = (n) => (Number.isFinite(n) ? Math.round(n * 1000) / 1000 : n);

/** Print the result line (last) and set the exit code: 1 when a target is missed. */
export function report(bench, results) {
  const missed = results.filter((r) => r.pass === false);
  console.log(JSON.stringify({ bench, results }));
  if (missed.length) process.exitCode = 1;
}
