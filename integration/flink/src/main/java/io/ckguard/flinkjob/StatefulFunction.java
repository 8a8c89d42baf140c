package io.ckguard.flinkjob;

import java.util.List;
import java.util.SplittableRandom;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/**
 * Keyed state: one random (incompressible) byte[] per key, rewritten on every element, so each
 * checkpoint's memtable flush uploads a new SST well above the 20 KB inline threshold. Operator
 * state: a running element count per subtask. Subtask 0 reports completed checkpoints and, when
 * the fail marker file appears, consumes it and throws, so Flink restores from its latest checkpoint.
 */
final class StatefulFunction extends KeyedProcessFunction<Long, Long, Long>
    implements CheckpointedFunction, CheckpointListener {
  private static final long serialVersionUID = 1L;

  private final int valueBytes;
  private final String failFile;
  private final String checkpointDir;

  private transient ValueState<byte[]> value;
  private transient ListState<Long> countState;
  private transient long count;
  private transient SplittableRandom random;
  private transient long nextPoll;

  StatefulFunction(int valueBytes, String failFile, String checkpointDir) {
    this.valueBytes = valueBytes;
    this.failFile = failFile;
    this.checkpointDir = checkpointDir;
  }

  private int subtask() {
    return getRuntimeContext().getTaskInfo().getIndexOfThisSubtask();
  }

  @Override
  public void initializeState(FunctionInitializationContext ctx) throws Exception {
    countState =
        ctx.getOperatorStateStore().getListState(new ListStateDescriptor<>("count", Types.LONG));
    for (Long c : countState.get()) {
      count += c;
    }
    if (ctx.isRestored()) {
      Events.RESTORES.incrementAndGet();
      Events.emit(
          "restored",
          "subtask=" + subtask() + " checkpoint-id="
              + (ctx.getRestoredCheckpointId().isPresent() ? ctx.getRestoredCheckpointId().getAsLong() : -1)
              + " count=" + count);
    } else {
      Events.emit("started-fresh", "subtask=" + subtask());
    }
  }

  @Override
  public void processElement(Long n, Context ctx, Collector<Long> out) throws Exception {
    if (value == null) {
      value = getRuntimeContext().getState(new ValueStateDescriptor<>("value", PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO));
      random = new SplittableRandom(n ^ System.nanoTime());
    }
    byte[] b = new byte[valueBytes];
    random.nextBytes(b);
    value.update(b);
    count++;
    long now = System.currentTimeMillis();
    if (failFile != null && subtask() == 0 && now >= nextPoll) {
      nextPoll = now + 100;
      if (Job.consume(failFile)) {
        Events.emit("induced-failure", "subtask=0");
        throw new RuntimeException("ckguard: induced task failure (fail marker " + failFile + ")");
      }
    }
    if ((count & 1023) == 0) {
      out.collect(count);
    }
  }

  @Override
  public void snapshotState(FunctionSnapshotContext ctx) throws Exception {
    countState.update(List.of(count));
  }

  @Override
  public void notifyCheckpointComplete(long id) {
    if (subtask() != 0) {
      return;
    }
    Events.COMPLETED.incrementAndGet();
    Events.LAST_COMPLETED_ID.set(id);
    String dir = checkpointDir.endsWith("/") ? checkpointDir : checkpointDir + "/";
    Events.emit(
        "checkpoint-completed",
        "id=" + id + " path=" + dir + getRuntimeContext().getJobInfo().getJobId() + "/chk-" + id);
  }
}
