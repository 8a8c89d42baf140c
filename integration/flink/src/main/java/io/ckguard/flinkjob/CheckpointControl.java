package io.ckguard.flinkjob;

import java.io.File;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;

/**
 * A pass-through operator in its own task (not chained to the stateful one) that lets a test keep a
 * checkpoint in flight while the stateful operator upstream has already snapshotted and uploaded its
 * files: while the hold marker exists, its snapshot waits, so the checkpoint stays IN_PROGRESS until
 * the marker is removed, or fails when execution.checkpointing.timeout expires it first (and so do
 * the checkpoints after it, their barriers queued behind the waiting snapshot; the job keeps running
 * when execution.checkpointing.tolerable-failed-checkpoints allows it). A snapshot that throws instead
 * would fail the task, not just the checkpoint.
 */
final class CheckpointControl implements MapFunction<Long, Long>, CheckpointedFunction {
  private static final long serialVersionUID = 1L;

  private final String holdFile;

  CheckpointControl(String holdFile) {
    this.holdFile = holdFile;
  }

  @Override
  public Long map(Long v) {
    return v;
  }

  @Override
  public void initializeState(FunctionInitializationContext ctx) {}

  @Override
  public void snapshotState(FunctionSnapshotContext ctx) throws Exception {
    if (!new File(holdFile).exists()) {
      return;
    }
    long id = ctx.getCheckpointId();
    Events.emit("checkpoint-held", "id=" + id);
    while (new File(holdFile).exists()) {
      Thread.sleep(50);
    }
    Events.emit("checkpoint-released", "id=" + id);
  }
}
