"""Streams take turns to start on the workers (`StartSlots`), and a stream gives its turn back once
its audio is made, whether or not its client reads it: clients that open streams and never read hold
no turn, so they cannot keep other listeners from starting."""

from __future__ import annotations

import time
import uuid

import grpc
import numpy as np

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.client import collect
from tests.support.faults.zone_mesh import wait_for
from tests.support.mesh import Mesh

STARTING = "tts_gateway_streams_starting"
WAITING = "tts_gateway_streams_waiting_to_start"
UNREAD = 12
"""More streams than a gateway of this mesh has turns for (a quarter of what its workers keep playing)."""


def test_streams_whose_clients_never_read_give_their_turns_back(mesh: Mesh) -> None:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        # Texts of one or two pieces (a turn is otherwise given back at the third), each made by the
        # workers (no other test says them: the cache misses), whose clients never read.
        unread = [stub.Synthesize(tts_pb2.SynthesizeRequest(text=f"Yes, {index + 40}."), timeout=120) for index in range(UNREAD)]
        try:
            # All their audio gets made, and every turn comes back while the streams are still open.
            wait_for(lambda: mesh.metric("gateway", STARTING) == 0 and mesh.metric("gateway", WAITING) == 0, timeout_s=90,
                     what="every unread stream to give its turn to start back")  # fmt: skip
            request = tts_pb2.SynthesizeRequest(text=f"And this one is heard, {uuid.uuid4().hex[:6]}.")
            spoken = collect(stub.Synthesize(request, timeout=60), time.monotonic())
            assert spoken.duration_s > 0.5 and np.sqrt(np.mean(spoken.samples**2)) > 0.02
        finally:
            for call in unread:
                call.cancel()
