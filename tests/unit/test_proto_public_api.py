"""The public and internal protos keep the names, shapes and style other programs rely on."""

from __future__ import annotations

import re
from pathlib import Path

from google.protobuf.descriptor import FieldDescriptor

from libs.pb.tts.acoustic.v1 import acoustic_pb2
from libs.pb.tts.common.v1 import mel_pb2
from libs.pb.tts.v1 import tts_pb2
from libs.pb.tts.vocoder.v1 import vocoder_pb2

PROTO_ROOT = Path(__file__).resolve().parents[2] / "protos"


def test_text_to_speech_service_has_exactly_the_three_public_methods() -> None:
    service = tts_pb2.DESCRIPTOR.services_by_name["TextToSpeech"]
    assert service.full_name == "tts.v1.TextToSpeech"
    shapes = {
        method.name: (method.input_type.name, method.output_type.name, method.client_streaming, method.server_streaming)
        for method in service.methods
    }
    assert shapes == {
        "Synthesize": ("SynthesizeRequest", "SynthesizeResponse", False, True),
        "StreamingSynthesize": ("StreamingSynthesizeRequest", "SynthesizeResponse", True, True),
        "ListVoices": ("ListVoicesRequest", "ListVoicesResponse", False, False),
    }


def test_synthesize_request_and_response_have_the_required_fields() -> None:
    request = tts_pb2.SynthesizeRequest.DESCRIPTOR.fields_by_name
    assert request["text"].type == FieldDescriptor.TYPE_STRING
    assert request["voice"].type == FieldDescriptor.TYPE_STRING
    assert request["speed"].type == FieldDescriptor.TYPE_FLOAT
    assert request["encoding"].enum_type.name == "AudioEncoding"
    assert request["sample_rate_hz"].type == FieldDescriptor.TYPE_INT32
    response = tts_pb2.SynthesizeResponse.DESCRIPTOR.fields_by_name
    assert response["audio"].type == FieldDescriptor.TYPE_BYTES
    assert response["sample_rate_hz"].type == FieldDescriptor.TYPE_INT32
    assert tts_pb2.AudioEncoding.Name(0) == "AUDIO_ENCODING_UNSPECIFIED"
    assert tts_pb2.AudioEncoding.Value("LINEAR_PCM") == 1


def test_every_enum_starts_with_an_unspecified_zero_value() -> None:
    for enum in (tts_pb2.AudioEncoding, mel_pb2.MelDType):
        assert enum.Name(0).endswith("_UNSPECIFIED")


def test_internal_services_are_bidirectional_streams() -> None:
    acoustic = acoustic_pb2.DESCRIPTOR.services_by_name["Acoustic"].methods_by_name["SynthesizeMel"]
    vocoder = vocoder_pb2.DESCRIPTOR.services_by_name["Vocoder"].methods_by_name["Vocode"]
    for method in (acoustic, vocoder):
        assert method.client_streaming and method.server_streaming
    # Mel travels a chunk of 40 ms slices per message on both hops.
    assert acoustic.output_type.full_name == "tts.common.v1.MelSlices"
    slices = vocoder.input_type.fields_by_name["slices"]
    assert slices.message_type.full_name == "tts.common.v1.MelSlice" and slices.is_repeated


def test_vocode_request_still_reads_a_single_slice_from_older_gateways() -> None:
    # Earlier gateways sent `MelSlice slice = 1`; the repeated field 1 reads that as one slice.
    old_style = mel_pb2.MelSlice(sentence_index=2, first_frame=7, frame_count=3).SerializeToString()
    wire = b"\x0a" + bytes([len(old_style)]) + old_style  # field 1, length-delimited
    request = vocoder_pb2.VocodeRequest.FromString(wire)
    assert [(s.sentence_index, s.first_frame, s.frame_count) for s in request.slices] == [(2, 7, 3)]


def test_every_field_and_enum_value_has_a_comment_above_it() -> None:
    field_line = re.compile(r"^\s*(repeated\s+)?[\w.]+\s+\w+\s*=\s*\d+;")
    enum_value_line = re.compile(r"^\s*[A-Z][A-Z0-9_]*\s*=\s*\d+;")
    uncommented = []
    for proto in sorted(PROTO_ROOT.rglob("*.proto")):
        lines = proto.read_text().splitlines()
        for number, line in enumerate(lines):
            if (field_line.match(line) or enum_value_line.match(line)) and not lines[number - 1].strip().startswith("//"):
                    uncommented.append(f"{proto.name}:{number + 1}: {line.strip()}")
    assert not uncommented, "fields without a comment:\n" + "\n".join(uncommented)
