import type { LogLevel, LogMetadata, Logger } from '@temporalio/common';
import type pino from 'pino';

/**
 * Routes the Temporal SDK's logger (the `log` that activities and workflows call, with their activity and
 * workflow ids attached, plus the worker's own messages) into the process's pino logger, so everything a worker
 * writes goes through one logger and its redaction.
 */
export class PinoTemporalLogger implements Logger {
  constructor(private readonly logger: pino.Logger) {}

  log(level: LogLevel, message: string, meta?: LogMetadata): void {
    // Temporal's levels (TRACE ... ERROR) are pino's method names in upper case.
    this.logger[level.toLowerCase() as Lowercase<LogLevel>](meta ?? {}, message);
  }
  trace(message: string, meta?: LogMetadata): void {
    this.log('TRACE', message, meta);
  }
  debug(message: string, meta?: LogMetadata): void {
    this.log('DEBUG', message, meta);
  }
  info(message: string, meta?: LogMetadata): void {
    this.log('INFO', message, meta);
  }
  warn(message: string, meta?: LogMetadata): void {
    this.log('WARN', message, meta);
  }
  error(message: string, meta?: LogMetadata): void {
    this.log('ERROR', message, meta);
  }
}
