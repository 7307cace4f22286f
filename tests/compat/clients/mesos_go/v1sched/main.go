// Command v1sched drives Mesilla's v1 scheduler API with mesos-go's httpsched
// caller, in JSON or protobuf: it subscribes, launches one workload on the
// first offer that fits, acknowledges every update and tears down.
//
//	-mode=launch: `echo hello` ends TASK_FINISHED after TASK_RUNNING
//	-mode=fail:   `exit 3` ends TASK_FAILED
//	-mode=kill:   `sleep 600`, KILL once TASK_RUNNING, ends TASK_KILLED
//	-mode=group:  LAUNCH_GROUP of two `echo hi` tasks on a DEFAULT executor, each TASK_FINISHED
//
// Env MASTER (host:port). Prints "check passed" and exits 0, else exits 1 with the reason.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/encoding/codecs"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli/httpsched"
	"github.com/mesos/mesos-go/api/v1/lib/resources"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
	os.Exit(1)
}

func task(id string, agent mesos.AgentID, cmd string) mesos.TaskInfo {
	shell := true
	return mesos.TaskInfo{
		Name: id, TaskID: mesos.TaskID{Value: id}, AgentID: agent,
		Resources: []mesos.Resource{resources.NewCPUs(0.1).Resource, resources.NewMemory(32).Resource},
		Command:   &mesos.CommandInfo{Value: &cmd, Shell: &shell},
	}
}

func main() {
	codec := flag.String("codec", codecs.NameProtobuf, "json or protobuf")
	mode := flag.String("mode", "launch", "launch, fail, kill or group")
	flag.Parse()
	master := os.Getenv("MASTER")
	mediaType := codecs.MediaTypeProtobuf
	if *codec == "json" {
		mediaType = codecs.MediaTypeJSON
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cli := httpcli.New(
		httpcli.Endpoint("http://"+master+"/api/v1/scheduler"),
		httpcli.Codec(codecs.ByMediaType[mediaType]),
		httpcli.Do(httpcli.With(httpcli.DefaultConfigOpt...)),
	)
	caller := httpsched.NewCaller(cli)
	var frameworkID string
	call := func(c *scheduler.Call) {
		resp, err := caller.Call(ctx, c.With(calls.Framework(frameworkID)))
		if resp != nil {
			resp.Close()
		}
		if err != nil {
			fail("%s: %v", c.GetType(), err)
		}
	}
	hostname, _ := os.Hostname()
	resp, err := caller.Call(ctx, calls.Subscribe(&mesos.FrameworkInfo{User: "root", Name: "compat v1sched " + *mode, Hostname: &hostname}))
	if err != nil {
		fail("SUBSCRIBE: %v", err)
	}
	defer resp.Close()

	want := map[string]mesos.TaskState{} // task id -> the state it must end in
	running := map[string]bool{}
	launched := false
	for len(want) > 0 || !launched {
		var e scheduler.Event
		if err := resp.Decode(&e); err != nil {
			fail("event stream: %v", err)
		}
		switch e.GetType() {
		case scheduler.Event_SUBSCRIBED:
			frameworkID = e.GetSubscribed().FrameworkID.Value
		case scheduler.Event_OFFERS:
			for _, offer := range e.GetOffers().GetOffers() {
				if launched {
					call(calls.Decline(offer.ID).With(calls.RefuseSeconds(time.Hour)))
					continue
				}
				launched = true
				var op mesos.Offer_Operation
				switch *mode {
				case "launch":
					op = calls.OpLaunch(task("v1-launch", offer.AgentID, "echo hello"))
					want["v1-launch"] = mesos.TASK_FINISHED
				case "fail":
					op = calls.OpLaunch(task("v1-fail", offer.AgentID, "exit 3"))
					want["v1-fail"] = mesos.TASK_FAILED
				case "kill":
					op = calls.OpLaunch(task("v1-kill", offer.AgentID, "sleep 600"))
					want["v1-kill"] = mesos.TASK_KILLED
				case "group":
					executor := mesos.ExecutorInfo{
						Type: mesos.ExecutorInfo_DEFAULT, ExecutorID: mesos.ExecutorID{Value: "v1-group"},
						FrameworkID: &mesos.FrameworkID{Value: frameworkID},
						Resources: []mesos.Resource{resources.NewCPUs(0.1).Resource, resources.NewMemory(32).Resource,
							resources.NewDisk(10).Resource},
					}
					op = calls.OpLaunchGroup(executor, task("v1-group-0", offer.AgentID, "echo hi"),
						task("v1-group-1", offer.AgentID, "echo hi"))
					want["v1-group-0"], want["v1-group-1"] = mesos.TASK_FINISHED, mesos.TASK_FINISHED
				default:
					fail("unknown -mode=%s", *mode)
				}
				call(calls.Accept(calls.OfferOperations{op}.WithOffers(offer.ID)))
			}
		case scheduler.Event_UPDATE:
			st := e.GetUpdate().GetStatus()
			id, state := st.TaskID.Value, st.GetState()
			fmt.Printf("ok: %s %s\n", id, state)
			if len(st.UUID) > 0 {
				call(calls.Acknowledge(st.AgentID.Value, id, st.UUID))
			}
			switch {
			case state == mesos.TASK_RUNNING:
				running[id] = true
				if *mode == "kill" {
					call(calls.Kill(id, st.AgentID.Value))
				}
			case state == want[id] && (running[id] || *mode == "fail"):
				delete(want, id)
			case state != mesos.TASK_STARTING && state != mesos.TASK_STAGING && state != mesos.TASK_KILLING:
				fail("task %s: unexpected %s (%s)", id, state, st.GetMessage())
			}
		case scheduler.Event_ERROR:
			fail("ERROR event: %s", e.GetError().GetMessage())
		}
	}
	call(&scheduler.Call{Type: scheduler.Call_TEARDOWN})
	fmt.Printf("ok: v1 scheduler check passed (mode=%s codec=%s)\n", *mode, *codec)
}
