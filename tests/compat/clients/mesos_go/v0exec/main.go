// Command v0exec is a custom executor on mesos-go's v0 MesosExecutorDriver,
// started by the agent for v0sched -executor: for each task it sends
// TASK_RUNNING, the framework message "hello <task id> <task data>" and
// TASK_FINISHED; a kill ends the task TASK_KILLED. It exits on the agent's
// shutdown, or a minute after it started.
package main

import (
	"fmt"
	"net"
	"os"
	"time"

	"github.com/mesos/mesos-go/api/v0/executor"
	mesos "github.com/mesos/mesos-go/api/v0/mesosproto"
)

type tasks struct{ done chan struct{} }

func update(d executor.ExecutorDriver, id *mesos.TaskID, state mesos.TaskState) {
	if _, err := d.SendStatusUpdate(&mesos.TaskStatus{TaskId: id, State: state.Enum()}); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: sending %s: %v\n", state, err)
	}
}

func (t tasks) Registered(executor.ExecutorDriver, *mesos.ExecutorInfo, *mesos.FrameworkInfo, *mesos.SlaveInfo) {
	fmt.Println("ok: registered")
}
func (t tasks) Reregistered(executor.ExecutorDriver, *mesos.SlaveInfo) {}
func (t tasks) Disconnected(executor.ExecutorDriver)                   {}
func (t tasks) LaunchTask(d executor.ExecutorDriver, task *mesos.TaskInfo) {
	update(d, task.TaskId, mesos.TaskState_TASK_RUNNING)
	if _, err := d.SendFrameworkMessage(fmt.Sprintf("hello %s %s", task.TaskId.GetValue(), task.Data)); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: framework message: %v\n", err)
	}
	update(d, task.TaskId, mesos.TaskState_TASK_FINISHED)
}
func (t tasks) KillTask(d executor.ExecutorDriver, id *mesos.TaskID) {
	update(d, id, mesos.TaskState_TASK_KILLED)
}
func (t tasks) FrameworkMessage(executor.ExecutorDriver, string) {}
func (t tasks) Shutdown(executor.ExecutorDriver)                 { close(t.done) }
func (t tasks) Error(_ executor.ExecutorDriver, message string) {
	fmt.Fprintf(os.Stderr, "FAIL: driver error: %s\n", message)
}

func main() {
	t := tasks{done: make(chan struct{})}
	driver, err := executor.NewMesosExecutorDriver(executor.DriverConfig{Executor: t, BindingAddress: net.ParseIP("127.0.0.1")})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: driver: %v\n", err)
		os.Exit(1)
	}
	if _, err := driver.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: driver start: %v\n", err)
		os.Exit(1)
	}
	select {
	case <-t.done:
	case <-time.After(time.Minute):
	}
	time.Sleep(500 * time.Millisecond) // the last acknowledgements
	driver.Stop()
}
