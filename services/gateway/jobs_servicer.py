"""The public LongFormSynthesis servicer: parse, call the job store (libs.jobs), map to gRPC."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from libs.encoding.encoders import ENCODINGS
from libs.jobs.audio import job_audio, output_rate_for
from libs.jobs.metrics import JobMetrics
from libs.jobs.requests import STATE_VALUES, check_idempotency_key, check_job_text, job_spec, job_status_for, page_bounds
from libs.jobs.store import JobRecord, JobStore
from libs.pb.tts.v1 import jobs_pb2
from libs.voice.registry import VoiceRegistry
from libs.wire.errors import InvalidRequestError
from libs.wire.request_decoding import UndecodableRequest, decoded, request_decoder

SERVICE_NAME = jobs_pb2.DESCRIPTOR.services_by_name["LongFormSynthesis"].full_name


class LongFormSynthesisServicer:
    """Create, get, list, cancel and delete jobs, and stream a finished job's file."""

    def __init__(self, *, store: JobStore, registry: VoiceRegistry, metrics: JobMetrics, max_text_chars: int) -> None:
        self._store = store
        self._registry = registry
        self._metrics = metrics
        self._max_text_chars = max_text_chars

    async def CreateJob(
        self, request: jobs_pb2.CreateJobRequest | UndecodableRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.Job:
        try:
            request = decoded(request)
            check_job_text(request.text, self._max_text_chars)
            check_idempotency_key(request.idempotency_key)
            spec = job_spec(
                self._registry, voice=request.voice, speed=request.speed, encoding=request.encoding,
                sample_rate_hz=request.sample_rate_hz, speaker_id=request.speaker_id,
            )  # fmt: skip
            record, new = await self._store.create(request.text, spec, request.idempotency_key)
        except Exception as error:
            await context.abort(*job_status_for(error))
        if new:
            self._metrics.created_total.inc()
        return job_message(record)

    async def GetJob(
        self, request: jobs_pb2.GetJobRequest | UndecodableRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.Job:
        try:
            return job_message(await self._store.get(decoded(request).id))
        except Exception as error:
            await context.abort(*job_status_for(error))

    async def ListJobs(
        self, request: jobs_pb2.ListJobsRequest | UndecodableRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.ListJobsResponse:
        try:
            request = decoded(request)
            limit, offset = page_bounds(request.page_size, request.page_token)
            records = await self._store.list(limit + 1, offset)
        except Exception as error:
            await context.abort(*job_status_for(error))
        more = len(records) > limit
        return jobs_pb2.ListJobsResponse(
            jobs=[job_message(record) for record in records[:limit]], next_page_token=str(offset + limit) if more else ""
        )

    async def CancelJob(
        self, request: jobs_pb2.CancelJobRequest | UndecodableRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.Job:
        try:
            return job_message(await self._store.cancel(decoded(request).id))
        except Exception as error:
            await context.abort(*job_status_for(error))

    async def DeleteJob(
        self, request: jobs_pb2.DeleteJobRequest | UndecodableRequest, context: grpc.aio.ServicerContext
    ) -> jobs_pb2.DeleteJobResponse:
        try:
            await self._store.delete(decoded(request).id)
        except Exception as error:
            await context.abort(*job_status_for(error))
        return jobs_pb2.DeleteJobResponse()

    async def GetJobAudio(
        self, request: jobs_pb2.GetJobAudioRequest | UndecodableRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[jobs_pb2.JobAudioChunk]:
        try:
            request = decoded(request)
            record = await self._store.get(request.id)
            encoding = request.encoding or record.spec.encoding
            if encoding not in ENCODINGS:
                raise InvalidRequestError(f"audio encoding {encoding} is not supported", field="encoding")
            pieces = await job_audio(self._store, record, encoding)
            rate_hz = output_rate_for(record, encoding)
            async for piece in pieces:
                yield jobs_pb2.JobAudioChunk(audio=piece, encoding=encoding, sample_rate_hz=rate_hz)
        except Exception as error:
            await context.abort(*job_status_for(error))


def job_message(record: JobRecord) -> jobs_pb2.Job:
    """A job as the API shows it."""
    return jobs_pb2.Job(
        id=record.job_id,
        state=STATE_VALUES.get(record.state, jobs_pb2.JOB_STATE_UNSPECIFIED),
        error=record.error,
        text_chars=record.text_chars,
        chars_done=record.chars_done,
        sentences_done=record.sentences_done,
        audio_s=record.audio_s,
        voice=record.spec.voice,
        encoding=record.spec.encoding,
        sample_rate_hz=record.spec.sample_rate_hz,
        created_s=record.created_s,
        updated_s=record.updated_s,
        attempts=record.attempts,
    )


def add_to_server(servicer: LongFormSynthesisServicer, server: grpc.aio.Server) -> None:
    """Register the servicer with request decoders that turn malformed requests into INVALID_ARGUMENT."""
    unary = {
        "CreateJob": (jobs_pb2.CreateJobRequest, jobs_pb2.Job),
        "GetJob": (jobs_pb2.GetJobRequest, jobs_pb2.Job),
        "ListJobs": (jobs_pb2.ListJobsRequest, jobs_pb2.ListJobsResponse),
        "CancelJob": (jobs_pb2.CancelJobRequest, jobs_pb2.Job),
        "DeleteJob": (jobs_pb2.DeleteJobRequest, jobs_pb2.DeleteJobResponse),
    }
    handlers: dict[str, grpc.RpcMethodHandler] = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name), request_deserializer=request_decoder(request), response_serializer=response.SerializeToString
        )
        for name, (request, response) in unary.items()
    }
    handlers["GetJobAudio"] = grpc.unary_stream_rpc_method_handler(
        servicer.GetJobAudio,
        request_deserializer=request_decoder(jobs_pb2.GetJobAudioRequest),
        response_serializer=jobs_pb2.JobAudioChunk.SerializeToString,
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
