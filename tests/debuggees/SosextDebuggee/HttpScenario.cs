using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Net.Http;
using System.Reflection;
using System.Runtime.InteropServices;
using System.Runtime.Loader;
using System.Threading;
using System.Threading.Tasks;
using Microsoft.AspNetCore.Builder;
using Microsoft.AspNetCore.Hosting;
using Microsoft.AspNetCore.Http;
using Microsoft.Extensions.Logging;

using SosextDebuggee;

namespace DebuggeeHost
{
    /// <summary>
    /// `http`: what taskstate, dumphttp and dumprequests read.
    /// * Tasks in each TaskStatus: Created (never started), WaitingForActivation (a
    ///   TaskCompletionSource's), WaitingToRun (queued to a scheduler that never runs it),
    ///   Running (blocked on a long-running thread), WaitingForChildrenToComplete (an attached
    ///   child blocks), RanToCompletion, Faulted, Canceled, and an async method's box awaiting.
    /// * A Kestrel server on 127.0.0.1 (a port the system picks; no network) and an HttpClient
    ///   in the same process: requests to /status/{code} completed with that status code (the
    ///   responses are kept), requests to /hold/... that the server's handler holds until exit,
    ///   so the client's requests are pending and the server's are in flight.
    /// The truth names each task's address, m_stateFlags and TaskStatus; each client request's
    /// HttpRequestMessage address, method, URI and status code (none while pending); each held
    /// server request's HttpContext address, method, scheme, path and query.
    /// </summary>
    internal sealed class HttpScenario : IScenario
    {
        private sealed class HoldingScheduler : TaskScheduler
        {
            public readonly List<Task> Held = new List<Task>();
            protected override void QueueTask(Task task) => Held.Add(task);
            protected override bool TryExecuteTaskInline(Task task, bool taskWasPreviouslyQueued) => false;
            protected override IEnumerable<Task> GetScheduledTasks() => Held;
        }

        private static readonly FieldInfo s_stateFlags =
            typeof(Task).GetField("m_stateFlags", BindingFlags.Instance | BindingFlags.NonPublic);

        private static readonly ManualResetEventSlim s_block = new ManualResetEventSlim(false, 0);
        private static readonly TaskCompletionSource s_release = new TaskCompletionSource(TaskCreationOptions.RunContinuationsAsynchronously);
        private static readonly List<(string name, Task task)> s_tasks = new List<(string, Task)>();
        private static readonly HoldingScheduler s_scheduler = new HoldingScheduler();
        private static TaskCompletionSource<int> s_promise;
        private static Task s_running;  // the Running one again, where docs/commands.md finds it (dumpclass)

        private static HttpClient s_client;
        private static readonly List<HttpResponseMessage> s_completed = new List<HttpResponseMessage>();
        private static readonly List<HttpRequestMessage> s_pending = new List<HttpRequestMessage>();
        private static readonly List<Task<HttpResponseMessage>> s_pendingSends = new List<Task<HttpResponseMessage>>();
        private static readonly SemaphoreSlim s_heldArrived = new SemaphoreSlim(0);

        // Before any method naming an ASP.NET Core type is compiled (see AspNetCoreLoader).
        public HttpScenario() => AspNetCoreLoader.Install();

        public void Build(string[] args)
        {
            BuildTasks();
            string baseUri = Server.Start();
            s_client = new HttpClient();
            foreach ((HttpMethod method, string path) in new[] {
                (HttpMethod.Get, "/status/200?item=1"), (HttpMethod.Get, "/status/404"),
                (HttpMethod.Post, "/status/500"), (HttpMethod.Delete, "/status/200?item=2") })
            {
                var request = new HttpRequestMessage(method, baseUri + path);
                s_completed.Add(s_client.SendAsync(request).GetAwaiter().GetResult());
            }
            // Held requests that differ only in numbers: the order of their contexts on the heap
            // depends on which threads allocated them, and docs/commands.md shows them.
            foreach (string path in new[] { "/hold/1?wait=1", "/hold/2?wait=2" })
            {
                var request = new HttpRequestMessage(HttpMethod.Get, baseUri + path);
                s_pending.Add(request);
                s_pendingSends.Add(s_client.SendAsync(request));
            }
            for (int i = 0; i < s_pending.Count; i++)
            {
                if (!s_heldArrived.Wait(TimeSpan.FromSeconds(30))) throw new TimeoutException("held request not received");
            }
        }

        private static void BuildTasks()
        {
            s_tasks.Add(("Created", new Task(() => { })));
            s_promise = new TaskCompletionSource<int>();
            s_tasks.Add(("WaitingForActivation", s_promise.Task));
            var queued = new Task(() => { });
            queued.Start(s_scheduler);
            s_tasks.Add(("WaitingToRun", queued));
            var started = new ManualResetEventSlim(false, 0);
            Task running = Task.Factory.StartNew(() => { started.Set(); s_block.Wait(); }, TaskCreationOptions.LongRunning);
            started.Wait();
            s_tasks.Add(("Running", running));
            s_running = running;
            // A parent whose delegate returned while its attached child still blocks.
            Task parent = Task.Factory.StartNew(() =>
                Task.Factory.StartNew(() => s_block.Wait(), TaskCreationOptions.AttachedToParent));
            SpinWait.SpinUntil(() => parent.Status == TaskStatus.WaitingForChildrenToComplete, TimeSpan.FromSeconds(30));
            s_tasks.Add(("WaitingForChildrenToComplete", parent));
            Task<int> ran = Task.Run(() => 42);
            ran.Wait();
            s_tasks.Add(("RanToCompletion", ran));
            Task faulted = Task.Run(() => throw new InvalidOperationException("sosext faulted task"));
            try { faulted.Wait(); } catch (AggregateException) { }
            s_tasks.Add(("Faulted", faulted));
            s_tasks.Add(("Canceled", Task.FromCanceled(new CancellationToken(true))));
            // An async method's task is its state machine box, a type derived from Task<TResult>.
            s_tasks.Add(("AsyncMethodBox", AwaitPromise()));
        }

        private static async Task<int> AwaitPromise() => await s_promise.Task + 1;

        public void Settle(int attempt)
        {
            GC.Collect(2, GCCollectionMode.Forced, blocking: true, compacting: true);
            GC.WaitForPendingFinalizers();
            GC.Collect(2, GCCollectionMode.Forced, blocking: true, compacting: true);
        }

        public void WriteTruth(Json w)
        {
            w.Name("http").BeginObject();
            w.Name("tasks").BeginArray();
            foreach ((string name, Task task) in s_tasks)
            {
                w.BeginObject();
                w.Prop("name", name);
                w.PropHex("address", Mem.Addr(task));
                w.PropHex("mt", Mem.MethodTableOf(task));
                w.Prop("stateFlags", (long)(int)s_stateFlags.GetValue(task));
                w.Prop("status", task.Status.ToString());
                w.EndObject();
            }
            w.EndArray();
            w.PropHex("notTask", Mem.Addr(s_scheduler));
            w.PropHex("requestMt", typeof(HttpRequestMessage).TypeHandle.Value);
            w.Name("requests").BeginArray();
            foreach (HttpResponseMessage response in s_completed)
                Request(w, response.RequestMessage, response);
            foreach (HttpRequestMessage request in s_pending)
                Request(w, request, null);
            w.EndArray();
            w.Name("incoming").BeginArray();
            Server.WriteHeld(w, s_pending);
            w.EndArray();
            w.EndObject();
        }

        private static void Request(Json w, HttpRequestMessage request, HttpResponseMessage response)
        {
            w.BeginObject();
            w.PropHex("address", Mem.Addr(request));
            w.Prop("method", request.Method.Method);
            w.Prop("uri", request.RequestUri.OriginalString);
            w.Prop("host", request.RequestUri.Host);
            if (response == null) w.Name("statusCode").Null();
            else w.Prop("statusCode", (long)(int)response.StatusCode);
            if (response == null) w.Name("response").Null();
            else w.PropHex("response", Mem.Addr(response));
            w.EndObject();
        }

        public bool OnCommand(string command) => false;

        /// <summary>Everything that names an ASP.NET Core type, so that it is compiled only after
        /// the loader is in place.</summary>
        private static class Server
        {
            private static WebApplication s_app;
            private static List<HttpContext> s_held;

            /// <summary>Starts Kestrel on a port of 127.0.0.1 the system picks; its base URI.</summary>
            public static string Start()
            {
                s_held = new List<HttpContext>();
                WebApplicationBuilder builder = WebApplication.CreateSlimBuilder(new WebApplicationOptions { Args = Array.Empty<string>() });
                builder.Logging.ClearProviders();
                builder.WebHost.UseUrls("http://127.0.0.1:0");
                s_app = builder.Build();
                s_app.Run(async context =>
                {
                    string path = context.Request.Path.Value ?? "";
                    // Kestrel makes the method's text only once asked: /hold/2 never asks (dumprequests
                    // then reads the parsed method).
                    if (path != "/hold/2") _ = context.Request.Method;
                    if (path.StartsWith("/status/", StringComparison.Ordinal))
                    {
                        context.Response.StatusCode = int.Parse(path.Substring("/status/".Length));
                        return;
                    }
                    lock (s_held) s_held.Add(context);
                    s_heldArrived.Release();
                    await s_release.Task;
                });
                s_app.StartAsync().GetAwaiter().GetResult();
                return s_app.Urls.First().TrimEnd('/');
            }

            public static void WriteHeld(Json w, List<HttpRequestMessage> sent)
            {
                lock (s_held)
                {
                    foreach (HttpContext context in s_held)
                    {
                        string path = context.Request.Path.Value;
                        w.BeginObject();
                        w.PropHex("address", Mem.Addr(context));
                        w.Prop("type", context.GetType().FullName);
                        // What the client sent (asking the context would make Kestrel's text of it).
                        w.Prop("method", sent.First(r => r.RequestUri.AbsolutePath == path).Method.Method);
                        w.Prop("scheme", context.Request.Scheme);
                        w.Prop("path", path);
                        w.Prop("query", context.Request.QueryString.Value);
                        w.EndObject();
                    }
                }
            }
        }
    }

    /// <summary>
    /// Loads ASP.NET Core's assemblies from its shared framework beside the running runtime
    /// (shared/Microsoft.AspNetCore.App/&lt;version&gt;), which the debuggee's runtimeconfig does not
    /// name (see SosextDebuggee.csproj). A self-contained build has them beside the app already.
    /// </summary>
    internal static class AspNetCoreLoader
    {
        private static bool s_installed;

        public static void Install()
        {
            if (s_installed) return;
            s_installed = true;
            string runtimeDir = RuntimeEnvironment.GetRuntimeDirectory().TrimEnd('/');
            string version = Path.GetFileName(runtimeDir);
            string frameworks = Path.GetFullPath(Path.Combine(runtimeDir, "..", "..", "Microsoft.AspNetCore.App"));
            string dir = Path.Combine(frameworks, version);
            if (!Directory.Exists(dir) && Directory.Exists(frameworks))
            {
                // Another patch of the same major version.
                string major = version.Split('.')[0] + ".";
                dir = Directory.GetDirectories(frameworks).Where(d => Path.GetFileName(d).StartsWith(major, StringComparison.Ordinal))
                    .OrderBy(d => d, StringComparer.Ordinal).LastOrDefault() ?? dir;
            }
            AssemblyLoadContext.Default.Resolving += (context, name) =>
            {
                string path = Path.Combine(dir, name.Name + ".dll");
                return File.Exists(path) ? context.LoadFromAssemblyPath(path) : null;
            };
        }
    }
}
