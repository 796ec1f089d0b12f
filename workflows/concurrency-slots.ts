import { condition } from '@temporalio/workflow';

/**
 * A counting semaphore for workflow code. The slot is taken inside the condition's predicate: the SDK evaluates
 * every blocked condition in one pass and unblocks all that are true before any continuation runs, so
 * `await condition(() => n < C); n += 1` lets every waiter through at once. Here a predicate that returns true
 * has already taken its slot, so at most `size` holders exist at any time; waiters are served in arrival order.
 */
export class ConcurrencySlots {
  private held = 0;
  /** Most slots held at once (observable in tests and bench records). */
  peak = 0;

  constructor(private size: number) {
    if (!Number.isInteger(size) || size < 1) throw new Error(`concurrency must be an integer >= 1, got ${size}`);
  }

  /** Slots in all, held or free. */
  get capacity(): number {
    return this.size;
  }

  /** More slots (a shard lane given slots by its stage); waiters take them at the next activation. */
  add(n: number): void {
    this.size += n;
  }

  /** Fewer slots: only free ones can go. */
  remove(n: number): void {
    if (n > this.size - this.held) throw new Error(`cannot remove ${n} slots: ${this.size - this.held} are free`);
    this.size -= n;
  }

  /** Takes a slot once one is free and `open()` holds (a gate the caller closes, as a weight sync does). */
  async acquire(open: () => boolean = () => true): Promise<void> {
    await condition(() => {
      if (this.held >= this.size || !open()) return false;
      this.held += 1;
      this.peak = Math.max(this.peak, this.held);
      return true;
    });
  }

  /** Slots held now. */
  get inFlight(): number {
    return this.held;
  }

  release(): void {
    this.held -= 1;
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    await this.acquire();
    try {
      return await fn();
    } finally {
      this.release();
    }
  }
}
