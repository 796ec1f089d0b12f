export async function tasks(_a: string[]): Promise<number> { return 2; }
