"""The CUSTOM executor of pymesos_scheduler.py custom, on pymesos's executor driver.

For its task it sends TASK_RUNNING, the framework message
"hello <task id> <task data>" and TASK_FINISHED, then stops.
"""

import threading
from typing import Any

from pymesos import (  # type: ignore[import-not-found]  # pymesos's own venv has it
    Executor,
    MesosExecutorDriver,
    decode_data,
    encode_data,
)


class Answer(Executor):  # type: ignore[misc]  # pymesos is untyped
    def launchTask(self, driver: Any, task: dict[str, Any]) -> None:
        def update(state: str) -> None:
            driver.sendStatusUpdate({"task_id": task["task_id"], "state": state})

        update("TASK_RUNNING")
        text = f"hello {task['task_id']['value']} {decode_data(task['data']).decode()}"
        driver.sendFrameworkMessage(encode_data(text.encode()))
        update("TASK_FINISHED")
        # the agent shuts an executor down once its tasks ended; stop on our own meanwhile too
        threading.Timer(5, driver.stop).start()


if __name__ == "__main__":
    MesosExecutorDriver(Answer(), use_addict=False).run()
