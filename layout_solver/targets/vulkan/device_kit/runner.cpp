// vk_runner: runs ExecuTorch programs through the Vulkan delegate, with nothing but the executorch wheel's
// runtime libraries and the Vulkan plugin beside it (no Python, no torch), so a GPU machine without executorch
// can run a device kit that `layout-solver device-kit build` made elsewhere.
//
//   vk_runner PLUGIN device                                the Vulkan device the runtime takes (its name)
//   vk_runner PLUGIN outputs PLAN OUTDIR [NAME...]           each program once: its outputs as raw files
//   vk_runner PLUGIN time PLAN WARMUP ROUNDS OUT.json [NAME...] interleaved rounds: per-round milliseconds
//   vk_runner PLUGIN profile PLAN WARMUP ROUNDS OUTDIR [NAME...] ETDump of WARMUP + ROUNDS runs per program
//
// PLAN holds one program per line, tab-separated: name, .pte path, method, input files (comma-separated raw
// little-endian tensors in the method's input order; paths relative to the plan's folder). NAMEs pick programs.
// A program that fails is reported in the JSON (outputs/time) or in NAME.error (profile); the others go on.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <executorch/devtools/etdump/etdump_flatcc.h>
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/runtime/backend/interface.h>

namespace et = ::executorch::runtime;
using executorch::extension::Module;

struct Program {
  std::string name, pte, method;
  std::vector<std::string> inputs;
};

static std::string folder_of(const std::string& path) {
  auto cut = path.find_last_of('/');
  return cut == std::string::npos ? std::string(".") : path.substr(0, cut);
}

static std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, sep)) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

static std::vector<Program> read_plan(const std::string& plan, const std::vector<std::string>& only) {
  std::ifstream in(plan);
  if (!in) {
    std::fprintf(stderr, "vk_runner: cannot read plan %s\n", plan.c_str());
    std::exit(2);
  }
  const std::string base = folder_of(plan) + "/";
  std::vector<Program> programs;
  std::string line;
  while (std::getline(in, line)) {
    auto fields = split(line, '\t');
    if (fields.size() < 3 || line[0] == '#') continue;
    if (!only.empty() && std::find(only.begin(), only.end(), fields[0]) == only.end()) continue;
    Program p{fields[0], base + fields[1], fields[2], {}};
    if (fields.size() > 3) {
      for (auto& f : split(fields[3], ',')) p.inputs.push_back(base + f);
    }
    programs.push_back(p);
  }
  return programs;
}

static std::string json_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
      continue;
    }
    out += c;
  }
  return out;
}

// One loaded program with its inputs, ready to run again and again.
struct Loaded {
  std::unique_ptr<Module> module;
  std::vector<executorch::extension::TensorPtr> tensors;
  std::vector<et::EValue> inputs;
  std::string error;
};

static Loaded load(const Program& p, bool trace) {
  Loaded l;
  std::unique_ptr<et::EventTracer> tracer;
  if (trace) tracer = std::make_unique<executorch::etdump::ETDumpGen>();
  l.module = std::make_unique<Module>(p.pte, Module::LoadMode::File, std::move(tracer));
  if (auto err = l.module->load_method(p.method); err != et::Error::Ok) {
    l.error = "loading method " + p.method + " failed: error " + std::to_string(static_cast<int>(err));
    return l;
  }
  auto meta = l.module->method_meta(p.method);
  if (!meta.ok()) {
    l.error = "no method meta";
    return l;
  }
  if (meta->num_inputs() != p.inputs.size()) {
    l.error = "the method takes " + std::to_string(meta->num_inputs()) + " inputs, the plan gives " +
        std::to_string(p.inputs.size());
    return l;
  }
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    auto info = meta->input_tensor_meta(i);
    if (!info.ok()) {
      l.error = "input " + std::to_string(i) + " is not a tensor";
      return l;
    }
    std::ifstream in(p.inputs[i], std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() != info->nbytes()) {
      l.error = "input " + std::to_string(i) + " (" + p.inputs[i] + ") has " + std::to_string(bytes.size()) +
          " bytes, the method wants " + std::to_string(info->nbytes());
      return l;
    }
    std::vector<executorch::aten::SizesType> sizes(info->sizes().begin(), info->sizes().end());
    l.tensors.push_back(executorch::extension::make_tensor_ptr(sizes, std::move(bytes), {}, {}, info->scalar_type()));
    l.inputs.emplace_back(*l.tensors.back());
  }
  return l;
}

static std::string run_once(Loaded& l, const Program& p, std::vector<et::EValue>* outputs = nullptr) {
  auto result = l.module->execute(p.method, l.inputs);
  if (!result.ok()) return "execution failed: error " + std::to_string(static_cast<int>(result.error()));
  if (outputs) *outputs = *result;
  return "";
}

static int cmd_outputs(const std::vector<Program>& programs, const std::string& outdir) {
  for (const auto& p : programs) {
    Loaded l = load(p, false);
    std::vector<et::EValue> outputs;
    std::string error = l.error.empty() ? run_once(l, p, &outputs) : l.error;
    std::ofstream meta(outdir + "/" + p.name + ".outputs.json");
    if (!error.empty()) {
      meta << "{\"error\": \"" << json_escape(error) << "\"}\n";
      std::fprintf(stderr, "vk_runner: %s: %s\n", p.name.c_str(), error.c_str());
      continue;
    }
    meta << "{\"outputs\": [";
    for (size_t k = 0; k < outputs.size(); ++k) {
      if (!outputs[k].isTensor()) continue;
      const auto& t = outputs[k].toTensor();
      std::ofstream raw(outdir + "/" + p.name + ".out" + std::to_string(k) + ".bin", std::ios::binary);
      raw.write(static_cast<const char*>(t.const_data_ptr()), t.nbytes());
      meta << (k ? ", " : "") << "{\"dtype\": " << static_cast<int>(t.scalar_type()) << ", \"sizes\": [";
      for (ssize_t d = 0; d < t.dim(); ++d) meta << (d ? ", " : "") << t.size(d);
      meta << "]}";
    }
    meta << "]}\n";
  }
  return 0;
}

static int cmd_time(const std::vector<Program>& programs, int warmup, int rounds, const std::string& out) {
  std::vector<Loaded> loaded;
  std::vector<std::string> errors(programs.size());
  for (size_t i = 0; i < programs.size(); ++i) {
    loaded.push_back(load(programs[i], false));
    errors[i] = loaded[i].error;
    for (int w = 0; w < warmup && errors[i].empty(); ++w) errors[i] = run_once(loaded[i], programs[i]);
  }
  std::vector<std::vector<double>> ms(programs.size());
  for (int r = 0; r < rounds; ++r) {
    // Every round runs each program once, in turn, the order reversed every other round: drift on the device
    // (clocks, other work) hits all of them alike.
    for (size_t j = 0; j < programs.size(); ++j) {
      size_t i = r % 2 == 0 ? j : programs.size() - 1 - j;
      if (!errors[i].empty()) continue;
      auto start = std::chrono::steady_clock::now();
      errors[i] = run_once(loaded[i], programs[i]);
      auto stop = std::chrono::steady_clock::now();
      ms[i].push_back(std::chrono::duration<double, std::milli>(stop - start).count());
    }
  }
  std::ofstream json(out);
  json << "{";
  for (size_t i = 0; i < programs.size(); ++i) {
    json << (i ? ", " : "") << "\"" << json_escape(programs[i].name) << "\": ";
    if (!errors[i].empty()) {
      json << "{\"error\": \"" << json_escape(errors[i]) << "\"}";
      continue;
    }
    json << "{\"ms\": [";
    for (size_t k = 0; k < ms[i].size(); ++k) json << (k ? ", " : "") << ms[i][k];
    json << "]}";
  }
  json << "}\n";
  return 0;
}

static int cmd_profile(const std::vector<Program>& programs, int warmup, int rounds, const std::string& outdir) {
  for (const auto& p : programs) {
    Loaded l = load(p, true);
    std::string error = l.error;
    for (int r = 0; r < warmup + rounds && error.empty(); ++r) error = run_once(l, p);
    if (!error.empty()) {
      std::ofstream(outdir + "/" + p.name + ".error") << error << "\n";
      std::fprintf(stderr, "vk_runner: %s: %s\n", p.name.c_str(), error.c_str());
      continue;
    }
    auto* tracer = static_cast<executorch::etdump::ETDumpGen*>(l.module->event_tracer());
    auto dump = tracer->get_etdump_data();
    std::ofstream(outdir + "/" + p.name + ".etdp", std::ios::binary)
        .write(static_cast<const char*>(dump.buf), dump.size);
    std::free(dump.buf);
  }
  return 0;
}

// The first physical device's name, from the loader itself (the runtime takes the first): a machine with only a
// loader and a driver has no vulkaninfo. VkInstanceCreateInfo and the head of VkPhysicalDeviceProperties, by hand:
// the kit builds without Vulkan headers.
static int cmd_device() {
  void* vulkan = dlopen("libvulkan.so.1", RTLD_NOW);
  if (!vulkan) return std::printf("unknown\n"), 0;
  struct CreateInfo {
    int32_t type;
    const void* next;
    uint32_t flags;
    const void* app;
    uint32_t layers;
    const void* layer_names;
    uint32_t extensions;
    const void* extension_names;
  } info{1, nullptr, 0, nullptr, 0, nullptr, 0, nullptr};
  using Create = int32_t (*)(const CreateInfo*, const void*, void**);
  using Enumerate = int32_t (*)(void*, uint32_t*, void**);
  using Properties = void (*)(void*, void*);
  using Destroy = void (*)(void*, const void*);
  auto create = reinterpret_cast<Create>(dlsym(vulkan, "vkCreateInstance"));
  auto enumerate = reinterpret_cast<Enumerate>(dlsym(vulkan, "vkEnumeratePhysicalDevices"));
  auto properties = reinterpret_cast<Properties>(dlsym(vulkan, "vkGetPhysicalDeviceProperties"));
  auto destroy = reinterpret_cast<Destroy>(dlsym(vulkan, "vkDestroyInstance"));
  void* instance = nullptr;
  if (!create || create(&info, nullptr, &instance) != 0) return std::printf("unknown\n"), 0;
  uint32_t count = 0;
  enumerate(instance, &count, nullptr);
  std::string name = "unknown";
  if (count) {
    std::vector<void*> devices(count);
    enumerate(instance, &count, devices.data());
    std::vector<char> props(4096, 0);  // apiVersion .. deviceType (5 x 4 bytes), then char deviceName[256]
    properties(devices[0], props.data());
    name = std::string(props.data() + 20, strnlen(props.data() + 20, 256));
  }
  destroy(instance, nullptr);
  std::printf("%s\n", name.c_str());
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[2]) == "device") {
    if (!dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL)) return std::fprintf(stderr, "vk_runner: %s\n", dlerror()), 3;
    auto* backend = et::get_backend_class("VulkanBackend");
    if (backend == nullptr || !backend->is_available()) return std::fprintf(stderr, "vk_runner: no Vulkan device\n"), 4;
    return cmd_device();
  }
  if (argc < 5) {
    std::fprintf(stderr, "usage: vk_runner PLUGIN outputs|time|profile PLAN ...\n");
    return 2;
  }
  // The plugin registers VulkanBackend with the runtime this process already holds (libexecutorch.so).
  if (!dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL)) {
    std::fprintf(stderr, "vk_runner: cannot load %s: %s\n", argv[1], dlerror());
    return 3;
  }
  auto* backend = et::get_backend_class("VulkanBackend");
  if (backend == nullptr || !backend->is_available()) {
    std::fprintf(stderr, "vk_runner: VulkanBackend %s\n", backend ? "found no Vulkan device" : "is not registered");
    return 4;
  }
  const std::string mode = argv[2];
  const int fixed = mode == "outputs" ? 5 : 7;
  if (argc < fixed) {
    std::fprintf(stderr, "vk_runner: %s takes more arguments\n", mode.c_str());
    return 2;
  }
  const auto programs = read_plan(argv[3], std::vector<std::string>(argv + fixed, argv + argc));
  if (mode == "outputs") return cmd_outputs(programs, argv[4]);
  if (mode == "time") return cmd_time(programs, std::atoi(argv[4]), std::atoi(argv[5]), argv[6]);
  if (mode == "profile") return cmd_profile(programs, std::atoi(argv[4]), std::atoi(argv[5]), argv[6]);
  std::fprintf(stderr, "vk_runner: unknown mode %s\n", mode.c_str());
  return 2;
}
