package io.ckguard.flinkjob;

import java.util.concurrent.atomic.AtomicLong;

/**
 * Machine-readable output of the job, one line per event, read by the Go e2e driver:
 * {@code CKGUARD-EVENT <name> key=value ...}. Values never contain spaces except the last
 * {@code cause=} field, which runs to the end of the line.
 */
final class Events {
  private Events() {}

  /** Checkpoints completed in this JVM (the MiniCluster runs the tasks in-process). */
  static final AtomicLong COMPLETED = new AtomicLong();

  static final AtomicLong LAST_COMPLETED_ID = new AtomicLong(-1);

  static final AtomicLong RESTORES = new AtomicLong();

  static synchronized void emit(String name, String fields) {
    System.out.println("CKGUARD-EVENT " + name + (fields.isEmpty() ? "" : " " + fields));
    System.out.flush();
  }
}
