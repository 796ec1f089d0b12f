import assert from 'node:assert/strict';
import { test } from 'node:test';
import { installFailure } from '../../datasets/thinkingbox/dataset-environment.ts';

// pip's output on a machine whose local indexes lack sly, with wheels only (as captured from `prepare-env`).
const conflict = [
  "WARNING: Location 'file:///opt/pypi-more/simple/uvicorn/' is ignored: it is neither a file nor a directory.",
  "WARNING: Location 'file:///opt/pypi/simple/sly/' is ignored: it is neither a file nor a directory.",
  'ERROR: Cannot install odata-query==0.10.0 because these package versions have conflicting dependencies.',
  'ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/',
].join('\n');

test('a conflict from sdist-only releases names --allow-sdist and drops the index-folder noise', () => {
  const message = installFailure(conflict, []).message;
  assert.match(message, /Cannot install odata-query==0\.10\.0/);
  assert.match(message, /--allow-sdist NAME/);
  assert.doesNotMatch(message, /is ignored: it is neither/);
});

test('a missing distribution names the package; other failures get no hint', () => {
  assert.match(installFailure('ERROR: No matching distribution found for sly<0.5', []).message, /sly<0\.5: no wheel/);
  assert.doesNotMatch(installFailure('ERROR: disk full', ['evil.example:443']).message, /--allow-sdist/);
  assert.match(installFailure('ERROR: disk full', ['evil.example:443']).message, /proxy refused: evil\.example:443/);
});
