import fs from 'node:fs';
import path from 'node:path';
import { parse as parseYaml, stringify } from 'yaml';

/**
 * Writes tasks/tiny-learning: the learning benchmark's suite. The tiny suite's five scenarios (same tools,
 * instructions and worked examples) with larger seed tables, and many single-call tasks in 13 families
 * (complete a to-do, lend a book, set a quantity, ...). A 135M model solves some single-call tasks and no
 * two-call ones, so only single-call families give a reward signal. Instances of a family alternate between
 * the training side and the held-out side, so held-out tasks are new arguments and phrasings of families
 * seen in training, never the training tasks themselves. Deterministic: rerunning rewrites identical files.
 *
 *   npx tsx bench/learning/generate-suite.ts
 */

const repo = path.resolve(import.meta.dirname, '..', '..');
const source = path.join(repo, 'tasks', 'tiny', 'scenarios');
const out = path.join(repo, 'tasks', 'tiny-learning');
const heldOutFile = path.join(repo, 'bench', 'learning', 'held-out.yaml');

// The scenarios' worked examples use ids 8 and 9 (and mango, fig): no task may use them.
const IDS = [1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20];
const INSTANCES = 8;

interface Call {
  tool: string;
  arguments: Record<string, unknown>;
}
interface GeneratedTask {
  uid: string;
  scenario: string;
  query: string;
  golden: Call[];
  tags: string[];
}
interface Family {
  scenario: string;
  name: string;
  tag: string;
  /** Two phrasings; instance i uses phrasing floor(i/2) % 2, so both sides see both. */
  make: (i: number) => { queries: [string, string]; call: Call };
}

const sql = (s: string) => `'${s.replace(/'/g, "''")}'`;

// prettier-ignore
const TODO_TITLES = ['buy milk', 'call mom', 'pay rent', 'walk dog', 'wash car', 'read book', 'clean desk',
  'buy stamps', 'fix sink', 'call bank', 'plan trip', 'sort mail', 'cook soup', 'iron shirt', 'water lawn',
  'pack bag', 'paint fence', 'buy eggs'];
const todos = IDS.map((id, k) => ({ id, title: TODO_TITLES[k]!, done: k % 3 === 2 }));
const NEW_TODO_TITLES = ['water plants', 'feed cat', 'fix bike', 'bake bread', 'mow lawn', 'send card', 'book flight'];

const FRUITS = ['apple', 'banana', 'pear', 'plum', 'cherry', 'lemon', 'orange', 'peach', 'grape', 'melon'];
const items = FRUITS.map((name, k) => ({ name, quantity: (k * 7 + 3) % 20 }));
const NEW_ITEMS = ['kiwi', 'lime', 'papaya', 'apricot', 'guava', 'date', 'quince', 'olive'];

// prettier-ignore
const BOOK_TITLES = ['Dune', 'Emma', 'Ulysses', 'Hamlet', 'Beloved', 'Walden', 'Ivanhoe', 'Rebecca', 'Persuasion',
  'Dracula', 'Lolita', 'Macbeth', 'Othello', 'Ben-Hur', 'Heidi', 'Kim', 'Nana', 'Siddhartha'];
const books = IDS.map((id, k) => ({ id, title: BOOK_TITLES[k]!, lent: k % 2 === 1 }));
const MEMBERS = ['bob', 'carl', 'dan', 'eve', 'ivy', 'joe', 'kim', 'lea'];
const NEW_BOOK_TITLES = ['Odyssey', 'Iliad', 'Inferno', 'Candide', 'Faust', 'Medea', 'Antigone', 'Beowulf'];

const spots = IDS.map((id, k) => ({ id, plate: k % 2 === 0 ? `p${id}q` : null }));
const PLATES = ['xy99', 'gh78', 'jk90', 'mn12', 'rt45', 'vw67', 'bc23', 'de56'];

const ROOMS = ['living room', 'bedroom', 'kitchen', 'office', 'hall', 'attic', 'garage', 'study', 'den'];
const devices = IDS.map((id, k) => ({
  id,
  room: ROOMS[k % ROOMS.length]!,
  on: k % 2 === 0,
  temperature: 17 + (k % 6),
}));

const pick = <T>(xs: T[], i: number): T => xs[i % xs.length]!;
const openTodos = todos.filter((t) => !t.done);
const lentBooks = books.filter((b) => b.lent);
const freeBooks = books.filter((b) => !b.lent);
const freeSpots = spots.filter((s) => s.plate === null);
const takenSpots = spots.filter((s) => s.plate !== null);

const families: Family[] = [
  {
    scenario: 'todo',
    name: 'complete',
    tag: 'update',
    make: (i) => {
      const t = pick(openTodos, i);
      return {
        queries: [`Mark to-do ${t.id} as done.`, `I finished ${t.title}. Mark to-do ${t.id} as done.`],
        call: { tool: 'complete_todo', arguments: { id: t.id } },
      };
    },
  },
  {
    scenario: 'todo',
    name: 'delete',
    tag: 'delete',
    make: (i) => {
      const t = pick(todos, i * 2 + 1);
      return {
        queries: [`Delete to-do ${t.id}.`, `I no longer need to ${t.title}. Delete to-do ${t.id}.`],
        call: { tool: 'delete_todo', arguments: { id: t.id } },
      };
    },
  },
  {
    scenario: 'todo',
    name: 'add',
    tag: 'insert',
    make: (i) => {
      const id = 30 + i;
      const title = pick(NEW_TODO_TITLES, i);
      return {
        queries: [`Add a to-do with id ${id} and title ${title}.`, `Please add to-do ${id} titled ${title}.`],
        call: { tool: 'add_todo', arguments: { id, title } },
      };
    },
  },
  {
    scenario: 'inventory',
    name: 'set',
    tag: 'update',
    make: (i) => {
      const it = pick(items, i);
      const quantity = it.quantity + 5 + i;
      return {
        queries: [
          `Set the quantity of ${it.name} to ${quantity}.`,
          `We counted the ${it.name} stock again: set the quantity of ${it.name} to ${quantity}.`,
        ],
        call: { tool: 'set_quantity', arguments: { name: it.name, quantity } },
      };
    },
  },
  {
    scenario: 'inventory',
    name: 'add',
    tag: 'insert',
    make: (i) => {
      const name = pick(NEW_ITEMS, i);
      const quantity = 3 + ((i * 5) % 17);
      return {
        queries: [
          `Add a new item ${name} with quantity ${quantity}.`,
          `We now sell ${name}: add it with quantity ${quantity}.`,
        ],
        call: { tool: 'add_item', arguments: { name, quantity } },
      };
    },
  },
  {
    scenario: 'inventory',
    name: 'remove',
    tag: 'delete',
    make: (i) => {
      const it = pick(items, i + 1);
      return {
        queries: [`Remove the item ${it.name}.`, `We stopped selling ${it.name}. Remove the item ${it.name}.`],
        call: { tool: 'remove_item', arguments: { name: it.name } },
      };
    },
  },
  {
    scenario: 'library',
    name: 'lend',
    tag: 'update',
    make: (i) => {
      const b = pick(freeBooks, i);
      const member = pick(MEMBERS, i);
      return {
        queries: [`Lend book ${b.id} to member ${member}.`, `Please lend book ${b.id} to member ${member}.`],
        call: { tool: 'lend_book', arguments: { id: b.id, member } },
      };
    },
  },
  {
    scenario: 'library',
    name: 'return',
    tag: 'update',
    make: (i) => {
      const b = pick(lentBooks, i);
      return {
        queries: [`Mark book ${b.id} as returned.`, `Book ${b.id} was returned today, please mark it as returned.`],
        call: { tool: 'return_book', arguments: { id: b.id } },
      };
    },
  },
  {
    scenario: 'library',
    name: 'add',
    tag: 'insert',
    make: (i) => {
      const id = 30 + i;
      const title = pick(NEW_BOOK_TITLES, i);
      return {
        queries: [`Add a new book with id ${id} and title ${title}.`, `We bought ${title}. Add it as book ${id}.`],
        call: { tool: 'add_book', arguments: { id, title } },
      };
    },
  },
  {
    scenario: 'parking',
    name: 'park',
    tag: 'update',
    make: (i) => {
      const s = pick(freeSpots, i);
      const plate = pick(PLATES, i);
      return {
        queries: [
          `Park car ${plate} in spot ${s.id}.`,
          `Car ${plate} just arrived. Park car ${plate} in spot ${s.id}.`,
        ],
        call: { tool: 'park_car', arguments: { id: s.id, plate } },
      };
    },
  },
  {
    scenario: 'parking',
    name: 'free',
    tag: 'update',
    make: (i) => {
      const s = pick(takenSpots, i);
      return {
        queries: [`Free spot ${s.id}.`, `Car ${s.plate} left. Mark spot ${s.id} as free.`],
        call: { tool: 'free_spot', arguments: { id: s.id } },
      };
    },
  },
  {
    scenario: 'thermostat',
    name: 'power',
    tag: 'update',
    make: (i) => {
      const d = pick(devices, i);
      const power = d.on ? 'off' : 'on';
      return {
        queries: [`Turn ${power} device ${d.id}.`, `Please turn ${power} device ${d.id} in the ${d.room}.`],
        call: { tool: 'set_power', arguments: { id: d.id, power } },
      };
    },
  },
  {
    scenario: 'thermostat',
    name: 'temperature',
    tag: 'update',
    make: (i) => {
      const d = pick(devices, i + 3);
      const temperature = d.temperature + 2 + (i % 4);
      return {
        queries: [
          `Set the temperature of device ${d.id} to ${temperature}.`,
          `It is cold in the ${d.room}. Set the temperature of device ${d.id} to ${temperature}.`,
        ],
        call: { tool: 'set_temperature', arguments: { id: d.id, temperature } },
      };
    },
  },
];

const seeds: Record<string, string> = {
  todo:
    'INSERT INTO todos (id, title, done) VALUES\n' +
    todos.map((t) => `  (${t.id}, ${sql(t.title)}, ${t.done})`).join(',\n') +
    ';\n',
  inventory:
    'INSERT INTO items (name, quantity) VALUES\n' +
    items.map((it) => `  (${sql(it.name)}, ${it.quantity})`).join(',\n') +
    ';\n',
  library:
    'INSERT INTO books (id, title, available, borrowed_by) VALUES\n' +
    books
      .map(
        (b, k) => `  (${b.id}, ${sql(b.title)}, ${!b.lent}, ${b.lent ? sql(pick(['ana', 'tom', 'uma'], k)) : 'NULL'})`,
      )
      .join(',\n') +
    ';\n',
  parking:
    'INSERT INTO spots (id, plate) VALUES\n' +
    spots.map((s) => `  (${s.id}, ${s.plate === null ? 'NULL' : sql(s.plate)})`).join(',\n') +
    ';\n',
  thermostat:
    'INSERT INTO devices (id, room, power, temperature) VALUES\n' +
    devices.map((d) => `  (${d.id}, ${sql(d.room)}, ${sql(d.on ? 'on' : 'off')}, ${d.temperature})`).join(',\n') +
    ';\n',
};

const header = '# Generated by bench/learning/generate-suite.ts; edit that file, not this one.\n';
fs.rmSync(out, { recursive: true, force: true });
fs.mkdirSync(path.join(out, 'scenarios'), { recursive: true });
fs.mkdirSync(path.join(out, 'tasks'), { recursive: true });

for (const name of Object.keys(seeds)) {
  const scenario = parseYaml(fs.readFileSync(path.join(source, `${name}.yaml`), 'utf8')) as Record<string, unknown>;
  scenario.description = `${String(scenario.description)} (learning benchmark: larger seed table)`;
  scenario.seed = seeds[name];
  fs.writeFileSync(path.join(out, 'scenarios', `${name}.yaml`), header + stringify(scenario, { lineWidth: 0 }));
}

const heldOut: string[] = [];
const byScenario = new Map<string, GeneratedTask[]>();
for (const f of families) {
  const seen = new Set<string>();
  for (let i = 0; i < INSTANCES; i++) {
    const { queries, call } = f.make(i);
    const key = JSON.stringify(call);
    if (seen.has(key)) throw new Error(`family ${f.scenario}/${f.name}: instance ${i} repeats ${key}`);
    seen.add(key);
    const side = i % 2 === 0 ? 'train' : 'held-out';
    const uid = `tiny-learning/${f.scenario}/${f.name}-${i}`;
    if (side === 'held-out') heldOut.push(uid);
    const task: GeneratedTask = {
      uid,
      scenario: f.scenario,
      query: queries[Math.floor(i / 2) % 2]!,
      golden: [call],
      tags: [f.tag, `family:${f.scenario}-${f.name}`, side],
    };
    byScenario.set(f.scenario, [...(byScenario.get(f.scenario) ?? []), task]);
  }
}
for (const [scenario, tasks] of byScenario)
  fs.writeFileSync(path.join(out, 'tasks', `${scenario}.yaml`), header + stringify({ tasks }, { lineWidth: 0 }));
fs.writeFileSync(
  heldOutFile,
  '# Held-out tasks of the learning benchmark: never trained on, the only ones evaluated.\n' +
    header +
    stringify(heldOut),
);
console.log(`${out}: ${families.length * INSTANCES} tasks, ${heldOut.length} held out (${heldOutFile})`);
