/**
 * The agent's system prompt: a generic part, the scenario's domain instructions, and (when the serving
 * template does not render tools itself) the tools in the Hermes convention the interpreter understands.
 */

export interface PromptTool {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
}

export const DONE_MARKER = '<DONE>';
export const END_TURN_TOOL: PromptTool = {
  name: 'end_turn',
  description: 'End the conversation when the task is complete or nothing more can be done.',
  inputSchema: { type: 'object', properties: {}, required: [] },
};

const GENERIC = [
  'You are an assistant that completes tasks for a user by calling tools.',
  'Follow the policy below exactly. Only change what the user asked for and the policy allows.',
  `When the task is finished, reply to the user briefly and end your message with ${DONE_MARKER}.`,
].join(' ');

export function toolsSection(tools: PromptTool[]): string {
  const specs = tools.map((t) =>
    JSON.stringify({
      type: 'function',
      function: { name: t.name, description: t.description, parameters: t.inputSchema },
    }),
  );
  return [
    '# Tools',
    'You may call tools. The available tools are listed in <tools></tools>:',
    `<tools>\n${specs.join('\n')}\n</tools>`,
    'To call a tool, write a JSON object with its name and arguments inside <tool_call></tool_call> tags:',
    '<tool_call>\n{"name": "tool_name", "arguments": {"arg": "value"}}\n</tool_call>',
  ].join('\n');
}

/** A worked example for very small models, which follow a shown pattern far better than a described one. */
const EXAMPLE = [
  '# Example',
  'User: Rename folder 5 to reports.',
  'Assistant: <tool_call>\n{"name": "rename_folder", "arguments": {"id": 5, "name": "reports"}}\n</tool_call>',
  'Tool: {"affected": 1}',
  `Assistant: Folder 5 is now called reports. ${DONE_MARKER}`,
  'Use only the tools listed above, with the values the user gave.',
].join('\n');

export interface ExampleExchange {
  user: string;
  calls: { tool: string; arguments: Record<string, unknown> }[];
  reply: string;
}

/** With scenario examples, the worked example is shown as earlier turns (small models copy turns best). */
export function buildAgentSystemPrompt(
  instructions: string,
  tools: PromptTool[],
  options: { toolsInPrompt: boolean; example: boolean; hasScenarioExamples?: boolean },
): string {
  const generic = options.example && !options.hasScenarioExamples;
  return [
    GENERIC,
    `# Policy\n${instructions.trim()}`,
    ...(options.toolsInPrompt ? [toolsSection(tools)] : []),
    ...(generic ? [EXAMPLE] : []),
  ].join('\n\n');
}

export function renderToolCall(tool: string, args: Record<string, unknown>): string {
  return `<tool_call>\n${JSON.stringify({ name: tool, arguments: args })}\n</tool_call>`;
}

/** Example exchanges as chat turns: user, assistant tool calls, tool results, assistant reply. */
export function exampleTurns(examples: ExampleExchange[]): { role: 'user' | 'assistant' | 'tool'; content: string }[] {
  return examples.flatMap((e) => [
    { role: 'user' as const, content: e.user },
    ...(e.calls.length
      ? [
          { role: 'assistant' as const, content: e.calls.map((c) => renderToolCall(c.tool, c.arguments)).join('\n') },
          ...e.calls.map(() => ({ role: 'tool' as const, content: '{"ok": true}' })),
        ]
      : []),
    { role: 'assistant' as const, content: `${e.reply} ${DONE_MARKER}` },
  ]);
}
