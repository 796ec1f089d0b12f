export async function demo(_a: string[]): Promise<number> { return 0; }
