// Globals the k6 runtime provides that @types/k6 leaves to the DOM or Node
// typings. Neither fits k6 (no window, no process), so only what the scripts
// use is declared, with k6's meaning.
// https://grafana.com/docs/k6/latest/javascript-api/#console
declare var console: {
  log(...args: unknown[]): void;
  info(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  error(...args: unknown[]): void;
  debug(...args: unknown[]): void;
};
