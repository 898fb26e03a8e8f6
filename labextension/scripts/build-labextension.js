/*
 * Build the prebuilt extension with @jupyterlab/builder against the installed JupyterLab's core
 * packages (its "staging" folder), which is what `jupyter labextension build` did. JupyterLab 4.6
 * hands that command to jupyter-builder, which looks the core versions up on the network; this
 * asks the local JupyterLab instead, so a build works offline and always matches the JupyterLab
 * the servers run. $PYTHON names the Python whose JupyterLab to build against.
 */
const { execFileSync } = require('child_process');

const python = process.env.PYTHON || 'python3';
const core = execFileSync(python, [
  '-c',
  "import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), 'staging'))"
])
  .toString()
  .trim();
const builder = require.resolve('@jupyterlab/builder/lib/build-labextension.js');
execFileSync(process.execPath, [builder, '--core-path', core, ...process.argv.slice(2), '.'], {
  stdio: 'inherit'
});
// install.json tells `jupyter labextension list` which Python package ships the extension.
require('fs').copyFileSync('install.json', 'prebuilt/install.json');
