// Command v0sched drives Mesilla's libprocess endpoint with mesos-go's v0
// MesosSchedulerDriver: it registers (authenticating with CRAM-MD5 when
// PRINCIPAL is set), launches one task on the first offer and follows it.
//
//	-mode=launch: `echo hello` ends TASK_FINISHED after TASK_RUNNING
//	-mode=kill:   `sleep 600`, KillTask once TASK_RUNNING, ends TASK_KILLED
//	-executor=PATH (launch): the task runs on the v0 custom executor PATH, which
//	              must send the framework message "hello <task id> <task data>"
//
// Env MASTER (host:port), TIMEOUT (seconds, default 90), PRINCIPAL and SECRET. Prints "check passed" and
// exits 0, else exits 1 with the reason.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gogo/protobuf/proto"
	"github.com/mesos/mesos-go/api/v0/auth"
	"github.com/mesos/mesos-go/api/v0/auth/sasl"
	mesos "github.com/mesos/mesos-go/api/v0/mesosproto"
	util "github.com/mesos/mesos-go/api/v0/mesosutil"
	sched "github.com/mesos/mesos-go/api/v0/scheduler"
)

// callbacks turns the driver's callbacks into what main's loop reads: offers,
// and every other event as one line.
type callbacks struct {
	offers chan []*mesos.Offer
	events chan string
}

func (c callbacks) Registered(_ sched.SchedulerDriver, id *mesos.FrameworkID, _ *mesos.MasterInfo) {
	c.events <- "registered " + id.GetValue()
}
func (c callbacks) Reregistered(sched.SchedulerDriver, *mesos.MasterInfo) {}
func (c callbacks) Disconnected(sched.SchedulerDriver)                    {}
func (c callbacks) ResourceOffers(_ sched.SchedulerDriver, offers []*mesos.Offer) {
	c.offers <- offers
}
func (c callbacks) OfferRescinded(sched.SchedulerDriver, *mesos.OfferID) {}
func (c callbacks) StatusUpdate(_ sched.SchedulerDriver, st *mesos.TaskStatus) {
	c.events <- "status " + st.GetState().String() + " " + st.GetMessage()
}
func (c callbacks) FrameworkMessage(_ sched.SchedulerDriver, _ *mesos.ExecutorID, _ *mesos.SlaveID, data string) {
	c.events <- "message " + data
}
func (c callbacks) SlaveLost(sched.SchedulerDriver, *mesos.SlaveID)                            {}
func (c callbacks) ExecutorLost(sched.SchedulerDriver, *mesos.ExecutorID, *mesos.SlaveID, int) {}
func (c callbacks) Error(_ sched.SchedulerDriver, message string)                              { c.events <- "error " + message }

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	mode := flag.String("mode", "launch", "launch or kill")
	executorPath := flag.String("executor", "", "a v0 custom executor to run the task on")
	flag.Parse()
	hostname, _ := os.Hostname()
	stream := callbacks{offers: make(chan []*mesos.Offer, 16), events: make(chan string, 64)}
	config := sched.DriverConfig{
		Scheduler:      stream,
		Framework:      &mesos.FrameworkInfo{User: proto.String("root"), Name: proto.String("compat v0sched " + *mode), Hostname: proto.String(hostname)},
		Master:         os.Getenv("MASTER"),
		BindingAddress: net.ParseIP("127.0.0.1"),
	}
	if principal := os.Getenv("PRINCIPAL"); principal != "" {
		config.Framework.Principal = proto.String(principal)
		config.Credential = &mesos.Credential{Principal: proto.String(principal), Secret: proto.String(os.Getenv("SECRET"))}
		config.WithAuthContext = func(ctx context.Context) context.Context {
			return sasl.WithBindingAddress(auth.WithLoginProvider(ctx, sasl.ProviderName), net.ParseIP("127.0.0.1"))
		}
	}
	driver, err := sched.NewMesosSchedulerDriver(config)
	if err != nil {
		fail("driver: %v", err)
	}
	if status, err := driver.Start(); err != nil {
		fail("driver start (%s): %v", status, err)
	}
	defer driver.Stop(false)

	taskID := "v0-" + *mode
	// The events still awaited: a framework message is not ordered with the status updates.
	want := map[string]bool{"status TASK_RUNNING": true, "status TASK_FINISHED": true}
	switch {
	case *executorPath != "":
		want["message hello "+taskID+" data-"+taskID] = true
	case *mode == "kill":
		want = map[string]bool{"status TASK_RUNNING": true, "status TASK_KILLED": true}
	}
	launched := false
	timeout, err := strconv.Atoi(os.Getenv("TIMEOUT"))
	if err != nil {
		timeout = 90
	}
	deadline := time.After(time.Duration(timeout) * time.Second)
	for len(want) > 0 {
		select {
		case <-deadline:
			fail("timed out awaiting %v", want)
		case offers := <-stream.offers:
			for _, offer := range offers {
				if launched {
					driver.DeclineOffer(offer.Id, &mesos.Filters{RefuseSeconds: proto.Float64(3600)})
					continue
				}
				launched = true
				task := &mesos.TaskInfo{
					Name: proto.String(taskID), TaskId: util.NewTaskID(taskID), SlaveId: offer.SlaveId,
					Resources: []*mesos.Resource{util.NewScalarResource("cpus", 0.1), util.NewScalarResource("mem", 32)},
				}
				if *executorPath != "" {
					task.Data = []byte("data-" + taskID)
					task.Executor = &mesos.ExecutorInfo{
						ExecutorId: util.NewExecutorID("v0-executor"),
						Command:    &mesos.CommandInfo{Value: proto.String(*executorPath), Shell: proto.Bool(false)},
						Resources:  []*mesos.Resource{util.NewScalarResource("cpus", 0.1), util.NewScalarResource("mem", 32)},
					}
				} else {
					command := map[string]string{"launch": "echo hello", "kill": "sleep 600"}[*mode]
					task.Command = &mesos.CommandInfo{Value: proto.String(command)}
				}
				if _, err := driver.LaunchTasks([]*mesos.OfferID{offer.Id}, []*mesos.TaskInfo{task}, &mesos.Filters{}); err != nil {
					fail("LaunchTasks: %v", err)
				}
			}
		case event := <-stream.events:
			fmt.Printf("ok: %s\n", event)
			expected := false
			for w := range want {
				if strings.HasPrefix(event, w) {
					delete(want, w)
					expected = true
				}
			}
			switch {
			case expected && *mode == "kill" && strings.HasPrefix(event, "status TASK_RUNNING"):
				if _, err := driver.KillTask(util.NewTaskID(taskID)); err != nil {
					fail("KillTask: %v", err)
				}
			case !expected && (strings.HasPrefix(event, "error ") || (strings.HasPrefix(event, "status ") &&
				!strings.HasPrefix(event, "status TASK_STARTING") && !strings.HasPrefix(event, "status TASK_KILLING"))):
				fail("unexpected %q awaiting %v", event, want)
			}
		}
	}
	fmt.Printf("ok: v0 scheduler check passed (mode=%s executor=%q)\n", *mode, *executorPath)
}
