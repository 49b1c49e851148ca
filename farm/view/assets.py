"""The viewer's CSS and JavaScript, inlined into every page: no file beside a page is needed to
draw it (the run page's rows come from trials.js), and nothing is fetched from the network."""

CSS = """
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:18px;color:#222}
h1{font-size:20px;margin:4px 0} h2{font-size:16px;margin-top:22px;border-bottom:1px solid #ddd;padding-bottom:3px}
h3{font-size:14px;margin:0 0 4px} a{color:#1a5fb4}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f2f4f7} th[data-col]{cursor:pointer} tr:nth-child(even) td{background:#fafafa}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#555;font-size:12px} nav{margin:8px 0;font-size:13px}
form.filters{display:flex;flex-wrap:wrap;gap:10px;align-items:end;font-size:12px;margin:10px 0}
form.filters label{display:flex;flex-direction:column;gap:2px}
.s-resolved{color:#2e7d32;font-weight:bold} .s-unresolved{color:#c62828;font-weight:bold}
.s-model_error{color:#e65100;font-weight:bold} .s-infra_error{color:#6a1b9a;font-weight:bold}
.flag{background:#fff4e5;border:1px solid #e65100;border-radius:3px;padding:0 4px;font-size:11px;margin-right:3px}
dl.facts{display:grid;grid-template-columns:repeat(4,max-content minmax(8em,auto));gap:2px 12px;font-size:12px}
dl.facts dt{color:#555} dl.facts dd{margin:0}
pre{white-space:pre-wrap;word-break:break-word;font-size:12px;margin:3px 0;background:#f7f7f9;padding:5px;
    border-radius:3px;max-height:none}
.step{border:1px solid #ddd;border-radius:4px;padding:8px;margin:10px 0}
.step.flagged{border-color:#e65100;background:#fffaf3}
.smeta{font-size:11px;color:#555;margin-bottom:4px}
details{margin:3px 0} summary{cursor:pointer;font-size:12px;color:#333}
.role{font-size:11px;font-weight:bold;text-transform:uppercase;color:#555}
.call{border-left:3px solid #1a5fb4;padding-left:6px;margin:4px 0} .tool{font-weight:bold;font-size:12px}
.obs summary{color:#1a5fb4}
.diff .add{color:#1b5e20;background:#e8f5e9} .diff .del{color:#b71c1c;background:#ffebee}
.diff .hunk{color:#6a1b9a}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:14px} .arm{min-width:0;overflow-x:auto} .arm[hidden]{display:none}
.arm dl.facts{grid-template-columns:repeat(2,max-content minmax(6em,auto))}
details.attempt{border:1px solid #bbb;border-radius:4px;padding:4px 8px;margin:8px 0;background:#fcfcfd}
details.attempt>summary{font-size:13px;font-weight:bold}
"""

# Shared by every page: on a trial page, previous / next trial in the run table's last filtered and
# sorted order; "back to the run" links that return to that table as it was (its #fragment);
# expand/collapse-all buttons of the step lists. The run page keeps both in sessionStorage (per tab).
PAGE_JS = """
function farmWalk(){var w=document.getElementById('walk');if(!w)return;var order;
  try{order=JSON.parse(sessionStorage.getItem('farm-view-order')||'[]');}catch(e){order=[];}
  var i=order.indexOf(w.dataset.page);if(i<0)return;
  function link(j,text){return j>=0&&j<order.length?'<a href="'+encodeURIComponent(order[j])+'.html" rel='+
    (j<i?'prev':'next')+'>'+text+'</a>':'<span class=note>'+text+'</span>';}
  w.innerHTML=' · '+link(i-1,'‹ previous')+' <span class=note>'+(i+1)+' of '+order.length+
    ' in the run table</span> '+link(i+1,'next ›');}
// again on every show: a page restored from the back-forward cache walks the table's order as it
// is now (the reviewer may have filtered it since), not as it was when the page first loaded
farmWalk();window.addEventListener('pageshow',farmWalk);
document.querySelectorAll('a[data-back]').forEach(function(a){try{var h=sessionStorage.getItem('farm-view-run');
  if(h)a.href=a.getAttribute('href').split('#')[0]+h;}catch(e){}});
document.querySelectorAll('[data-toggle]').forEach(function(b){b.addEventListener('click',function(){
  var open=b.dataset.toggle==='open';
  document.querySelectorAll('.steps details').forEach(function(d){d.open=open;});});});
// a link to a step or an attempt folded inside <details> (an earlier attempt) opens what holds it
function farmReveal(){var e=location.hash&&document.getElementById(decodeURIComponent(location.hash.slice(1)));
  for(;e;e=e.parentElement){if(e.tagName==='DETAILS')e.open=true;}}
window.addEventListener('hashchange',farmReveal);farmReveal();
"""

# The run page: filters, sort and pagination over the rows of trials.js (window.FARM_TRIALS), in
# the browser, so a static site needs no server; the filter state lives in the URL's #fragment,
# which makes a filtered view a link one can share.
RUN_JS = """
(function(){
var D=window.FARM_TRIALS, C={}, PAGE=100;
D.columns.forEach(function(c,i){C[c]=i;});
var FILTERS=['benchmark','arm','status','exit_reason','flag'];
var form=document.getElementById('filters'), body=document.querySelector('#trials tbody');
function esc(s){return String(s==null?'':s).replace(/[&<>"']/g,function(c){
  return {'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[c];});}
function val(r,c){var v=r[C[c]];return v==null?'':String(v);}
function values(f){var s={};D.rows.forEach(function(r){
  if(f==='flag'){r[C.flags].forEach(function(x){s[x]=1;});}else{s[val(r,f)]=1;}});return Object.keys(s).sort();}
FILTERS.forEach(function(f){var sel=form.elements[f];
  if(f==='flag'){sel.add(new Option('any flag','*'));sel.add(new Option('no flag','-'));}
  values(f).forEach(function(v){sel.add(new Option(v===''?'(none)':v,v===''?'~':v));});});
function state(){var p=new URLSearchParams(location.hash.slice(1)),st={};
  FILTERS.concat(['q','page','sort','desc']).forEach(function(k){st[k]=p.get(k)||'';});return st;}
function save(st){var p=new URLSearchParams();Object.keys(st).forEach(function(k){if(st[k])p.set(k,st[k]);});
  history.replaceState(null,'','#'+p.toString());}
function keep(r,st){
  for(var i=0;i<FILTERS.length;i++){var f=FILTERS[i],v=st[f];if(!v)continue;
    if(f==='flag'){var fl=r[C.flags];
      if(v==='*'?!fl.length:v==='-'?fl.length:fl.indexOf(v)<0)return false;}
    else if(val(r,f)!==(v==='~'?'':v))return false;}
  return !st.q||val(r,'task_id').toLowerCase().indexOf(st.q.toLowerCase())>=0;}
function num(v){return v==null?'':(typeof v==='number'&&v%1?v.toFixed(2):v);}
function row(r){var cell=r[C.cell],t=(r[C.prompt_tokens]||0)+(r[C.completion_tokens]||0);
  return '<tr><td><a class="trial" href="t/'+esc(r[C.page])+'.html">'+esc(r[C.task_id])+'</a></td>'+
    '<td>'+esc(r[C.benchmark])+'</td><td class="num">'+esc(r[C.seed])+'</td><td>'+esc(r[C.arm])+'</td>'+
    '<td>'+esc(r[C.model_preset]||r[C.policy])+'</td>'+
    '<td class="s-'+esc(r[C.status])+'">'+esc(r[C.status])+'</td><td class="num">'+esc(num(r[C.reward]))+'</td>'+
    '<td>'+esc(r[C.exit_reason])+'</td><td>'+esc(r[C.error_class])+'</td>'+
    '<td class="num">'+esc(r[C.steps])+'</td><td class="num">'+esc(r[C.tool_calls])+'</td>'+
    '<td class="num">'+esc(t||'')+'</td><td class="num">'+esc(num(r[C.wall_s]))+'</td>'+
    '<td>'+r[C.flags].map(function(f){return '<span class="flag">'+esc(f)+'</span>';}).join('')+'</td>'+
    '<td>'+(cell?'<a href="c/'+esc(cell)+'.html?a='+encodeURIComponent(r[C.arm])+'">arms</a>':'')+'</td></tr>';}
function render(){var st=state();
  FILTERS.forEach(function(f){form.elements[f].value=st[f];});form.elements.q.value=st.q;
  var rows=D.rows.filter(function(r){return keep(r,st);});
  if(st.sort&&C[st.sort]!==undefined){var k=C[st.sort],d=st.desc?-1:1;rows=rows.slice().sort(function(a,b){
    var x=a[k],y=b[k];if(x===y)return 0;if(x==null)return 1;if(y==null)return -1;return (x<y?-1:1)*d;});}
  var pages=Math.max(1,Math.ceil(rows.length/PAGE)),page=Math.min(Math.max(1,parseInt(st.page||'1',10)||1),pages);
  body.innerHTML=rows.slice((page-1)*PAGE,page*PAGE).map(row).join('');
  try{sessionStorage.setItem('farm-view-run',location.hash);
    sessionStorage.setItem('farm-view-order',JSON.stringify(rows.map(function(r){return r[C.page];})));}catch(e){}
  document.getElementById('count').textContent=rows.length+' of '+D.rows.length+' trials';
  document.getElementById('pageinfo').textContent='page '+page+' of '+pages;
  document.getElementById('prev').disabled=page<=1;document.getElementById('next').disabled=page>=pages;}
function change(extra){var st=state();FILTERS.forEach(function(f){st[f]=form.elements[f].value;});
  st.q=form.elements.q.value;st.page='';Object.assign(st,extra||{});save(st);render();}
form.addEventListener('change',function(){change();});
form.elements.q.addEventListener('input',function(){change();});
form.addEventListener('submit',function(e){e.preventDefault();});
function turn(d){var st=state();st.page=String((parseInt(st.page||'1',10)||1)+d);save(st);render();}
document.getElementById('prev').addEventListener('click',function(){turn(-1);});
document.getElementById('next').addEventListener('click',function(){turn(1);});
document.querySelectorAll('th[data-col]').forEach(function(th){th.addEventListener('click',function(){
  var st=state(),c=th.dataset.col;st.desc=st.sort===c&&!st.desc?'1':'';st.sort=c;save(st);render();});});
window.addEventListener('hashchange',render);
render();
})();
"""

# The side-by-side page: which two arms are shown comes from ?a=&b= (a link from the run table
# or a trial page names its own arm as a) and from the two selectors.
PAIR_JS = """
(function(){
var arms=[].slice.call(document.querySelectorAll('.arm')).map(function(e){return e.dataset.arm;});
var p=new URLSearchParams(location.search),A=document.getElementById('arm-a'),B=document.getElementById('arm-b');
arms.forEach(function(a){A.add(new Option(a,a));B.add(new Option(a,a));});
A.value=arms.indexOf(p.get('a'))>=0?p.get('a'):arms[0];
B.value=arms.indexOf(p.get('b'))>=0?p.get('b'):(arms.filter(function(a){return a!==A.value;})[0]||A.value);
function show(){var grid=document.querySelector('.pair');
  document.querySelectorAll('.arm').forEach(function(e){e.hidden=[A.value,B.value].indexOf(e.dataset.arm)<0;});
  [A.value,B.value].forEach(function(a){grid.appendChild(document.querySelector('.arm[data-arm="'+CSS.escape(a)+'"]'));});}
A.addEventListener('change',show);B.addEventListener('change',show);show();
})();
"""
