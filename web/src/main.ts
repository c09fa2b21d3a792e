// The TTS mesh's web page: speaks the text through the edge over grpc-web, plays each piece the
// moment it arrives (Web Audio, no waiting for the end), shows the time to first audio, highlights
// each word while it is spoken, and downloads the result in the chosen encoding.

import { createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import { AudioEncoding, TextToSpeech, type SentenceInfo, type WordInfo } from "./gen/tts/v1/tts_pb";

const transport = createGrpcWebTransport({ baseUrl: window.location.origin, useBinaryFormat: true });
const client = createClient(TextToSpeech, transport);

/** What the page has done, readable by tests and by curious people in the console. */
interface PageState {
  firstAudioMs: number | null;
  samplesScheduled: number;
  sampleRateHz: number;
  wordsShown: string[];
  words: WordInfo[];
  playedSpans: [number, number][];
  done: boolean;
  error: string | null;
}

const state: PageState = {
  firstAudioMs: null, samplesScheduled: 0, sampleRateHz: 0, wordsShown: [], words: [], playedSpans: [], done: false, error: null,
};
(window as unknown as { ttsPage: PageState }).ttsPage = state;

const $ = <T extends HTMLElement>(id: string): T => document.getElementById(id) as T;
const textBox = $<HTMLTextAreaElement>("text");
const voiceSelect = $<HTMLSelectElement>("voice");
const speedInput = $<HTMLInputElement>("speed");
const encodingSelect = $<HTMLSelectElement>("encoding");
const speakButton = $<HTMLButtonElement>("speak");
const downloadButton = $<HTMLButtonElement>("download");
const statusLine = $<HTMLElement>("status");
const wordsLine = $<HTMLElement>("words");

const DOWNLOADS: Record<string, { encoding: AudioEncoding; extension: string; type: string }> = {
  wav: { encoding: AudioEncoding.WAV, extension: "wav", type: "audio/wav" },
  ogg_opus: { encoding: AudioEncoding.OGG_OPUS, extension: "opus", type: "audio/ogg" },
  mp3: { encoding: AudioEncoding.MP3, extension: "mp3", type: "audio/mpeg" },
  flac: { encoding: AudioEncoding.FLAC, extension: "flac", type: "audio/flac" },
};

let audioContext: AudioContext | null = null;

async function loadVoices(): Promise<void> {
  try {
    const reply = await client.listVoices({});
    voiceSelect.replaceChildren(
      ...reply.voices.map((voice) => new Option(`${voice.name} (${voice.languageCode})`, voice.name, voice.isDefault, voice.isDefault)),
    );
  } catch (error) {
    showError(error);
  }
}

function showError(error: unknown): void {
  state.error = error instanceof Error ? error.message : String(error);
  statusLine.textContent = `Error: ${state.error}`;
  statusLine.classList.add("error");
}

async function speak(): Promise<void> {
  speakButton.disabled = true;
  downloadButton.disabled = true;
  Object.assign(state, { firstAudioMs: null, samplesScheduled: 0, wordsShown: [], words: [], playedSpans: [], done: false, error: null });
  statusLine.classList.remove("error");
  statusLine.textContent = "Speaking…";
  wordsLine.replaceChildren();
  audioContext ??= new AudioContext();
  await audioContext.resume();
  const context = audioContext;
  const started = performance.now();
  // Timeline second t of the utterance plays at context time t + shift; the shift grows if the
  // network falls behind the playback (the next piece then starts late, and the words follow).
  let shift: number | null = null;
  let playEnd = 0;
  const wordSpans: HTMLSpanElement[] = [];
  try {
    const stream = client.synthesize({
      text: textBox.value,
      voice: voiceSelect.value,
      speed: Number(speedInput.value),
      encoding: AudioEncoding.FLOAT_PCM,
    });
    for await (const response of stream) {
      if (response.sentence) {
        addWords(response.sentence, wordSpans);
      }
      if (response.audio.byteLength === 0) {
        continue;
      }
      if (state.firstAudioMs === null) {
        state.firstAudioMs = performance.now() - started;
        statusLine.textContent = `First audio after ${state.firstAudioMs.toFixed(0)} ms`;
      }
      const samples = new Float32Array(response.audio.slice().buffer);
      const buffer = context.createBuffer(1, samples.length, response.sampleRateHz);
      buffer.copyToChannel(samples, 0);
      const source = context.createBufferSource();
      source.buffer = buffer;
      source.connect(context.destination);
      const earliest = context.currentTime + 0.05;
      if (shift === null || response.audioOffsetS + shift < earliest) {
        shift = earliest - response.audioOffsetS;
      }
      const at = response.audioOffsetS + shift;
      source.start(at);
      playEnd = at + buffer.duration;
      state.samplesScheduled += samples.length;
      state.sampleRateHz = response.sampleRateHz;
      state.playedSpans.push([response.audioOffsetS, response.audioOffsetS + response.audioDurationS]);
      highlightWhilePlaying(context, () => shift ?? 0, wordSpans, () => playEnd);
    }
    state.done = true;
    statusLine.textContent += ` · ${(state.samplesScheduled / Math.max(state.sampleRateHz, 1)).toFixed(2)} s of audio`;
    downloadButton.disabled = false;
  } catch (error) {
    showError(error);
  } finally {
    speakButton.disabled = false;
  }
}

function addWords(sentence: SentenceInfo, spans: HTMLSpanElement[]): void {
  for (const word of sentence.words) {
    const span = document.createElement("span");
    span.textContent = word.text;
    span.dataset.start = String(word.startS);
    span.dataset.end = String(word.endS);
    wordsLine.append(span, " ");
    spans.push(span);
    state.words.push(word);
  }
}

let highlighted: HTMLSpanElement[] | null = null; // the words an animation loop is lighting now

// One animation loop per utterance lights the word being spoken, until its last scheduled piece has
// played or another utterance starts.
function highlightWhilePlaying(context: AudioContext, shift: () => number, spans: HTMLSpanElement[], until: () => number): void {
  if (highlighted === spans) {
    return;
  }
  highlighted = spans;
  let next = 0; // the first word not yet reached
  const step = (): void => {
    const now = context.currentTime - shift();
    // Every word reached since the last frame counts as shown, even one shorter than a frame.
    while (next < spans.length && Number(spans[next].dataset.start) <= now) {
      state.wordsShown.push(spans[next].textContent ?? "");
      next += 1;
    }
    for (const span of spans) {
      span.classList.toggle("speaking", Number(span.dataset.start) <= now && now < Number(span.dataset.end));
    }
    if (highlighted !== spans) {
      return; // another utterance took over
    }
    if (context.currentTime < until() + 0.1 || !state.done) {
      requestAnimationFrame(step);
    } else {
      highlighted = null;
    }
  };
  requestAnimationFrame(step);
}

async function download(): Promise<void> {
  const choice = DOWNLOADS[encodingSelect.value];
  const parts: Uint8Array[] = [];
  try {
    for await (const response of client.synthesize({
      text: textBox.value, voice: voiceSelect.value, speed: Number(speedInput.value), encoding: choice.encoding,
    })) {
      parts.push(response.audio);
    }
  } catch (error) {
    showError(error);
    return;
  }
  const link = document.createElement("a");
  link.href = URL.createObjectURL(new Blob(parts as BlobPart[], { type: choice.type }));
  link.download = `speech.${choice.extension}`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
}

speakButton.addEventListener("click", () => void speak());
downloadButton.addEventListener("click", () => void download());
void loadVoices();
