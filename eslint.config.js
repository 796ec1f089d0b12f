// ESLint flat config: typescript-eslint with type information, plus the rules our Temporal code relies on.
import tseslint from 'typescript-eslint';
import importX, { createNodeResolver } from 'eslint-plugin-import-x';
import { builtinModules } from 'node:module';

const nodeBuiltins = [...builtinModules, ...builtinModules.map((m) => `node:${m}`)];

export default tseslint.config(
  { ignores: ['node_modules/**', '.tools/**', '.state/**', 'out/**', '**/*.js', '**/*.cjs'] },
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    plugins: { 'import-x': importX },
    settings: {
      'import-x/extensions': ['.ts'],
      'import-x/parsers': { '@typescript-eslint/parser': ['.ts'] },
      'import-x/resolver-next': [createNodeResolver({ extensions: ['.ts', '.js'] })],
    },
    rules: {
      '@typescript-eslint/no-floating-promises': [
        'error',
        // node:test's test() and describe() return promises the runner itself awaits.
        {
          allowForKnownSafeCalls: [
            { from: 'package', package: 'node:test', name: ['test', 'describe', 'it', 'suite'] },
          ],
        },
      ],
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'import-x/no-cycle': 'error',
    },
  },
  {
    // Tests read parsed YAML and JSON documents whose shape the assertions themselves check.
    files: ['test/**/*.ts', 'bench/**/*.ts', 'scripts/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // Workflow code runs in Temporal's deterministic sandbox: no Node built-ins, and activities and the services
    // they call only as types.
    files: ['workflows/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: nodeBuiltins.map((name) => ({ name, message: 'workflow code may not use Node built-ins' })),
          patterns: [
            {
              group: [
                ...['**/activities/**', '**/rollout/**', '**/sandbox/**', '**/task-suites/**', '**/learner-control/**'],
                ...[
                  '**/campaign-records/**',
                  '**/datasets/**',
                  '**/infra/**',
                  '@temporalio/activity',
                  '@temporalio/worker',
                  '@temporalio/client',
                ],
              ],
              allowTypeImports: true,
              message: 'workflows see activities, services (and worker/client code) only as types',
            },
          ],
        },
      ],
    },
  },
);
